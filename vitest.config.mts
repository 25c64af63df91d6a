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
    ],
  },
});
