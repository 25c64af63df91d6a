import { defineConfig } from "vitest/config";
import { startFirst } from "./test/support/sequencer";

// Tests are grouped by what they need: `unit` needs nothing; `libvirtd` needs
// the real test host (scripts/test-host), which the global setup starts;
// `pulumi` drives the real Pulumi CLI; `guest` boots real guests.
//
// Three files run at once in the first group on 2 cores (vitest 4 otherwise
// runs one at a time there): the files wait on libvirtd, QEMU and CLI
// processes much of the time (with two, a fifth of the cores' time was
// idle), and every file names its libvirt objects uniquely and counts only
// its own (a sweep of a whole pool uses a pool of its own). The projects of
// one group must state the same worker count.
const FIRST_GROUP_WORKERS = 3;

// The longest files of the guest group start first, side by side: the stock
// first boot (three guests, two installing from a mirror, and a boot sector)
// and the egress fleet (a guest, then its replacements one at a time, which
// leave a core free if they run last and alone); then the bake (a stock
// builder, then two guests at once); the other files follow as workers free.
const START_FIRST = [
  "test/guest/first-boot.test.ts",
  "test/guest/egress-fleet.test.ts",
  "test/guest/bake.test.ts",
];

export default defineConfig({
  test: {
    sequence: { sequencer: startFirst(START_FIRST) },
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          // A guard against hangs, not a speed goal: some cases derive keys
          // from passphrases (bcrypt_pbkdf in JavaScript) beside the other
          // group's processes and the stock image builds on 2 cores.
          testTimeout: 30_000,
          maxWorkers: FIRST_GROUP_WORKERS,
        },
      },
      {
        test: {
          name: "libvirtd",
          include: ["test/libvirtd/**/*.test.ts"],
          maxWorkers: FIRST_GROUP_WORKERS,
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
          maxWorkers: FIRST_GROUP_WORKERS,
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
          // small HTTP servers inside the test host's namespace. Its two files
          // run side by side (the workers mostly wait on guests), in a group
          // of their own after the others so boots do not slow them down.
          name: "guest",
          include: ["test/guest/**/*.test.ts"],
          globalSetup: ["test/support/global-setup.ts", "test/guest/global-setup.ts"],
          testTimeout: 900_000,
          hookTimeout: 1_020_000,
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
