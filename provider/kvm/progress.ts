/**
 * What a provision reports while it runs, for whoever shows progress (the
 * resource turns these into status lines in Pulumi's display). Types and the
 * list of create's steps only. Pure.
 */

/** Create's steps, in order; a step hook runs before each (tests cut creates short there). */
export const CREATE_STEPS = [
  "lookup-domain",
  "pool",
  "image",
  "bake",
  "overlay",
  "seed-volume",
  "seed-upload",
  "paths",
  "define",
  "start",
] as const;
export type CreateStep = (typeof CREATE_STEPS)[number];

/** One progress report. */
export type Progress =
  /** Waiting for another provision of the same host and name in this process to finish. */
  | { kind: "queued" }
  /** Choosing the host of a pool with the most room. */
  | { kind: "placing"; pool: string[] }
  /** Waiting for a create slot on the host (its concurrentCreates are in flight); `ahead` waiting before this one. */
  | { kind: "waiting-host"; host: string; ahead: number }
  /** Create is about to run this step. */
  | { kind: "step"; step: CreateStep }
  /** The base image is being uploaded into the host's cache (or this create waits for another's upload). */
  | { kind: "image-upload"; bytes: number; totalBytes?: number; elapsedMs: number }
  /**
   * The image is being baked on the host (host/image-bake.ts), or this create
   * waits for another's bake: another process's (`waiting`), or the builder
   * booting, installing packages, or cleaning and powering off.
   */
  | { kind: "bake"; host: string; phase: BakePhase; elapsedMs: number }
  /** Waiting for the guest's address (since the wait began). */
  | { kind: "wait-ip"; elapsedMs: number }
  /** Waiting for cloud-init to finish the first boot: its stage now, or that the guest agent does not answer yet. */
  | { kind: "first-boot"; elapsedMs: number; stage?: string; agent?: false }
  /** Waiting for the caller's readiness gate (the health check). */
  | { kind: "ready"; elapsedMs: number };

/** Where a bake is, as a waiter sees it. */
export type BakePhase = "waiting" | "booting" | "installing" | "finishing";

/** Receives progress reports; must not throw (what it throws is ignored). */
export type ProgressListener = (p: Progress) => void;

/** Calls `listener` with `p`, ignoring a listener that throws: progress never fails an operation. */
export function report(listener: ProgressListener | undefined, p: Progress): void {
  if (listener === undefined) return;
  try {
    listener(p);
  } catch {
    // Progress is for display only.
  }
}
