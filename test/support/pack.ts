/**
 * The package as a user gets it: `npm pack` of a copy of the working tree,
 * so that packing (whose prepack rebuilds dist/) never touches the checkout
 * other test files run from.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { NO_REGISTRY_ENV } from "./npm-offline";
import { repoRoot } from "./test-host";

/** Packs a copy of the working tree (packing in place would rebuild dist/ under the other test files). */
export function pack(dir: string, versionOverride?: string): string {
  const src = path.join(dir, "src");
  rmSync(src, { recursive: true, force: true });
  mkdirSync(src, { recursive: true });
  const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z"], {
    cwd: repoRoot,
    encoding: "utf8",
  })
    .split("\0")
    // Everything, tests and bench included: what keeps them out of the tarball must be package.json's `files`.
    .filter((f) => f !== "");
  for (const f of files) {
    try {
      cpSync(path.join(repoRoot, f), path.join(src, f), { recursive: true });
    } catch (err) {
      // A file deleted in the working tree but still in the index.
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
  }
  symlinkSync(path.join(repoRoot, "node_modules"), path.join(src, "node_modules"));
  if (versionOverride !== undefined) {
    const pkg = JSON.parse(readFileSync(path.join(src, "package.json"), "utf8")) as { version: string };
    pkg.version = versionOverride;
    writeFileSync(path.join(src, "package.json"), JSON.stringify(pkg, null, 2));
  }
  const out = path.join(dir, "tarballs");
  mkdirSync(out, { recursive: true });
  const r = JSON.parse(
    execFileSync("npm", ["pack", "--json", "--pack-destination", out], {
      cwd: src,
      // Packing reads no registry: one that tried would fail on loopback.
      env: { ...process.env, ...NO_REGISTRY_ENV },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    }),
  ) as { filename: string }[];
  return path.join(out, (r[0] as { filename: string }).filename);
}
