import { defineConfig } from "vitest/config";
import { startInOrder } from "./test/support/sequencer";

// Tests are grouped by what they need: `unit` needs nothing; `libvirtd` needs
// the real test host (scripts/test-host), which the global setup starts;
// `pulumi` drives the real Pulumi CLI; `guest` boots real guests.
//
// All four run in one pool of three workers on 2 cores: the files of the
// first three wait on libvirtd, QEMU and CLI processes much of the time (with
// two workers and the guests apart, a fifth of the cores' time was idle),
// and a booted guest fills those waits. Every file names its libvirt objects
// uniquely and counts only its own (a sweep of a whole pool uses a pool of
// its own). Vitest requires one worker count for projects run together.
const WORKERS = 3;

// The order files start in (test/support/sequencer.ts). The egress fleet
// leads: its four boots (two at once, then one rotation at a time) use about
// a core for most of its run, beside the other groups' files. Then the
// libvirtd, pulumi and unit files, then the other guest files, the longest
// first: the stock first boot (four guests, two installing from a mirror)
// and the bake (a stock builder, then two guests at once).
const START_ORDER = {
  lead: ["test/guest/egress-fleet.test.ts"],
  projects: ["libvirtd", "pulumi", "unit", "guest"],
  first: ["test/guest/first-boot.test.ts", "test/guest/bake.test.ts"],
};

export default defineConfig({
  test: {
    sequence: { sequencer: startInOrder(START_ORDER) },
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          // A guard against hangs, not a speed goal: some cases derive keys
          // from passphrases (bcrypt_pbkdf in JavaScript) beside the other
          // group's processes and the stock image builds on 2 cores.
          testTimeout: 30_000,
          maxWorkers: WORKERS,
        },
      },
      {
        test: {
          name: "libvirtd",
          include: ["test/libvirtd/**/*.test.ts"],
          maxWorkers: WORKERS,
          globalSetup: ["test/support/global-setup.ts"],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      {
        test: {
          // The real Pulumi CLI against the test host: builds dist/, links
          // the package for the repo's own programs, builds the CLI if needed.
          name: "pulumi",
          include: ["test/pulumi/**/*.test.ts"],
          maxWorkers: WORKERS,
          globalSetup: ["test/support/global-setup.ts", "test/pulumi/global-setup.ts"],
          testTimeout: 600_000,
          hookTimeout: 600_000,
        },
      },
      {
        test: {
          // Real guests (scripts/guest-image) booted under TCG: the setup
          // starts building the images in the background (each file waits
          // for the one it boots), prepares the Pulumi CLI and starts
          // small HTTP servers inside the test host's namespace.
          name: "guest",
          include: ["test/guest/**/*.test.ts"],
          globalSetup: ["test/support/global-setup.ts", "test/guest/global-setup.ts"],
          testTimeout: 900_000,
          hookTimeout: 1_020_000,
          maxWorkers: WORKERS,
        },
      },
    ],
  },
});
