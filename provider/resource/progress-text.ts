/**
 * The words of a provision's progress, as the user sees them in Pulumi's
 * progress column ("uploading image: 96 of 180 MiB, 42 MB/s"). Pure.
 */
import type { BakePhase, CreateStep, Progress } from "../kvm/progress";

const STEP_TEXT: Record<CreateStep, string> = {
  "lookup-domain": "looking for an existing domain",
  pool: "opening the storage pool",
  image: "checking the image cache",
  bake: "checking the baked image",
  overlay: "creating the root disk",
  "seed-volume": "writing the cloud-init seed",
  "seed-upload": "uploading the cloud-init seed",
  paths: "resolving the disk paths",
  define: "defining the domain",
  start: "starting the domain",
};

const MIB = 1024 * 1024;

const BAKE_TEXT: Record<BakePhase, string> = {
  waiting: "another process is baking it",
  booting: "booting the builder",
  installing: "installing packages",
  finishing: "cleaning up",
};

function seconds(ms: number): string {
  return `${Math.floor(ms / 1000)}s`;
}

/** "2m10s", "45s". */
function minutes(ms: number): string {
  const s = Math.floor(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

/** One progress report as a status line. */
export function progressText(p: Progress): string {
  switch (p.kind) {
    case "queued":
      return "waiting for another create of this name to finish";
    case "placing":
      return `choosing the host with the most room among ${p.pool.join(", ")}`;
    case "waiting-host":
      return `waiting for a create slot on host ${p.host} (${p.ahead} ahead; its concurrentCreates are busy)`;
    case "step":
      return STEP_TEXT[p.step];
    case "image-upload": {
      const done = (p.bytes / MIB).toFixed(0);
      const of = p.totalBytes !== undefined ? ` of ${(p.totalBytes / MIB).toFixed(0)}` : "";
      const rate = p.elapsedMs > 0 ? `, ${(p.bytes / 1e6 / (p.elapsedMs / 1000)).toFixed(0)} MB/s` : "";
      return `uploading the image: ${done}${of} MiB${rate}`;
    }
    case "bake":
      return `baking image on ${p.host}: ${BAKE_TEXT[p.phase]} (${minutes(p.elapsedMs)})`;
    case "wait-ip":
      return `waiting for the guest's IP address (${seconds(p.elapsedMs)})`;
    case "first-boot": {
      const what =
        p.agent === false
          ? "its guest agent does not answer yet"
          : p.stage !== undefined
            ? `stage ${p.stage}`
            : "running";
      return `waiting for cloud-init to finish the first boot (${what}, ${seconds(p.elapsedMs)})`;
    }
    case "ready":
      return `waiting for the proxy to pass its health check (${seconds(p.elapsedMs)})`;
  }
}
