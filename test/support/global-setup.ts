import { execFileSync } from "node:child_process";
import path from "node:path";

const script = path.resolve(__dirname, "../../scripts/test-host");

// Starts the real test host unless it already answers. A host this setup
// started is stopped again at the end; one that was already running (a
// developer's) is left alone. Failure to start fails the run loudly: these
// tests never skip for want of a daemon.
export default function setup(): () => void {
  // Under `npm test` (scripts/test) the runner owns the host's lifecycle.
  if (process.env.KVMP_TEST_HOST_MANAGED === "1") {
    execFileSync(script, ["start"], { stdio: "inherit" });
    return () => {};
  }
  const wasRunning = (() => {
    try {
      execFileSync(script, ["status"], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  })();
  execFileSync(script, ["start"], { stdio: "inherit" });
  return () => {
    if (!wasRunning && process.env.KVMP_KEEP_TEST_HOST !== "1") {
      execFileSync(script, ["stop"], { stdio: "inherit" });
    }
  };
}
