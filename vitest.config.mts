import { defineConfig } from "vitest/config";

// Tests are grouped by what they need: `unit` needs nothing; `libvirtd` needs
// the real test host (scripts/test-host), which the global setup starts.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
        },
      },
      {
        test: {
          name: "libvirtd",
          include: ["test/libvirtd/**/*.test.ts"],
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
          globalSetup: ["test/support/global-setup.ts", "test/pulumi/global-setup.ts"],
          testTimeout: 600_000,
          hookTimeout: 600_000,
        },
      },
    ],
  },
});
