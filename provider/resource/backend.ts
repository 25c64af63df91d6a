/**
 * Which Pulumi backend a program's stacks live in, as the CLI chooses it:
 * `PULUMI_BACKEND_URL`, else the project's `backend.url` (Pulumi.yaml in
 * the program's folder or above), else the backend `pulumi login` made
 * current (`credentials.json` in `PULUMI_HOME`, default `~/.pulumi`). The
 * VM's metadata records a short hash of it (no path or bucket name lands on
 * the host), and the orphan sweep, computing the same from the project
 * folder it runs in, judges only VMs of its own backend: a stack of another
 * backend would look gone from this one. Reads the environment and files.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import YAML from "yaml";

function readJson(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
}

/** The project's `backend.url`, from the nearest Pulumi.yaml at or above `dir`. */
function projectBackend(dir: string): string | undefined {
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    for (const name of ["Pulumi.yaml", "Pulumi.yml"]) {
      const file = path.join(d, name);
      if (!existsSync(file)) continue;
      try {
        const doc = YAML.parse(readFileSync(file, "utf8")) as { backend?: { url?: unknown } } | null;
        return typeof doc?.backend?.url === "string" ? doc.backend.url : undefined;
      } catch {
        return undefined;
      }
    }
    if (path.dirname(d) === d) return undefined;
  }
}

/** The backend URL the Pulumi CLI uses for a program in `dir`, or undefined when none can be told. */
export function backendUrl(
  env: NodeJS.ProcessEnv = process.env,
  dir: string = process.cwd(),
): string | undefined {
  const fromEnv = env.PULUMI_BACKEND_URL?.trim();
  if (fromEnv) return fromEnv;
  const fromProject = projectBackend(dir);
  if (fromProject !== undefined) return fromProject;
  const home = env.PULUMI_HOME ?? path.join(os.homedir(), ".pulumi");
  const creds = readJson(path.join(home, "credentials.json")) as { current?: unknown } | undefined;
  return typeof creds?.current === "string" && creds.current !== "" ? creds.current : undefined;
}

/** A short, stable identity of the backend (16 hex characters), or undefined when it cannot be told. */
export function backendIdentity(
  env: NodeJS.ProcessEnv = process.env,
  dir: string = process.cwd(),
): string | undefined {
  const url = backendUrl(env, dir);
  if (url === undefined) return undefined;
  return createHash("sha256").update(url.replace(/\/+$/, "")).digest("hex").slice(0, 16);
}
