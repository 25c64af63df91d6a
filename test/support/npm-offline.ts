/**
 * npm installs in tests, from the npm cache alone: a test reaches no
 * registry. The repository's `npm ci` fills the cache with every package
 * package-lock.json names (their tarballs, and the registry documents npm
 * reads to find them, since the lock names no URLs), so a project outside
 * the repository installs at the lock's versions: its lock starts as the
 * repository's, and each local tarball it depends on gets the entry npm
 * itself would write. npm then places nothing the lock has no entry for: a
 * package placed anew has its peer dependencies resolved from their full
 * registry documents, which `npm ci` never fetches. An `npm install` that
 * names packages takes each one's newest release its range matches in the
 * cached registry document, which may be newer than the lock's (whose
 * tarball the cache lacks): a test names the version the lock pins.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "./test-host";

/** An address on loopback nothing listens on (the discard port). */
const NOWHERE = "http://127.0.0.1:9/";

/**
 * npm's configuration for every npm a test runs: offline, and every request
 * through a proxy at {@link NOWHERE}, so one that slips past `--offline`
 * fails at once on loopback instead of reaching the internet. The registry
 * itself stays the default one: the cache's entries are keyed by its URLs.
 */
export const NO_REGISTRY_ENV: NodeJS.ProcessEnv = {
  npm_config_offline: "true",
  npm_config_proxy: NOWHERE,
  npm_config_https_proxy: NOWHERE,
  npm_config_noproxy: "",
};

interface Lock {
  name?: string;
  version?: string;
  packages: Record<string, Record<string, unknown>>;
}

function readJson<T>(file: string): T {
  return JSON.parse(readFileSync(file, "utf8")) as T;
}

/** `{ name: version }` for each of `names`, at the version the repository's package-lock.json pins. */
export function lockedVersions(...names: string[]): Record<string, string> {
  const lock = readJson<Lock>(path.join(repoRoot, "package-lock.json"));
  return Object.fromEntries(
    names.map((name) => {
      const version = lock.packages[`node_modules/${name}`]?.version;
      if (typeof version !== "string") throw new Error(`package-lock.json pins no ${name}`);
      return [name, version];
    }),
  );
}

/** The fields of a package's package.json that npm copies into its lock entry. */
const LOCK_FIELDS = [
  "license",
  "dependencies",
  "optionalDependencies",
  "peerDependencies",
  "peerDependenciesMeta",
  "bin",
  "engines",
  "os",
  "cpu",
];

/** The lock entry npm writes for the local tarball `tgz` in the project at `dir`. */
function tarballEntry(dir: string, name: string, tgz: string): Record<string, unknown> {
  const tar = spawnSync("tar", ["-xzOf", tgz, "package/package.json"], { encoding: "utf8" });
  if (tar.status !== 0) throw new Error(`tar -xzOf ${tgz} exited ${tar.status}:\n${tar.stderr}`);
  const pkg = JSON.parse(tar.stdout) as Record<string, unknown> & { scripts?: Record<string, string> };
  if (pkg.name !== name) throw new Error(`${tgz} holds ${String(pkg.name)}, not ${name}`);
  const entry: Record<string, unknown> = {
    version: pkg.version,
    resolved: `file:${path.relative(dir, tgz)}`,
    integrity: `sha512-${createHash("sha512").update(readFileSync(tgz)).digest("base64")}`,
  };
  for (const field of LOCK_FIELDS) if (pkg[field] !== undefined) entry[field] = pkg[field];
  if (["preinstall", "install", "postinstall"].some((s) => pkg.scripts?.[s] !== undefined)) {
    entry.hasInstallScript = true;
  }
  return entry;
}

/**
 * The package-lock.json npm installs from offline in the project at `dir` (a
 * folder that need not exist yet) whose package.json is `root`: the lock
 * `base` (the project's earlier one, else the repository's) with `root` as its
 * root, and the entry npm would write for each of `tarballs` (`{ name: path
 * of a local .tgz }`).
 */
export function offlineLock(
  dir: string,
  root: { name: string; dependencies?: Record<string, string> },
  tarballs: Record<string, string>,
  base = path.join(repoRoot, "package-lock.json"),
): string {
  const lock = readJson<Lock>(base);
  lock.name = root.name;
  delete lock.version;
  lock.packages[""] = {
    name: root.name,
    ...(root.dependencies === undefined ? {} : { dependencies: root.dependencies }),
  };
  for (const [name, tgz] of Object.entries(tarballs))
    lock.packages[`node_modules/${name}`] = tarballEntry(dir, name, tgz);
  return JSON.stringify(lock, null, 2);
}

/**
 * Adds `dependencies` to the package.json of the project at `dir` and
 * installs with `npm install --offline`: a value is a version (one of
 * {@link lockedVersions}) or the path of a local tarball (`*.tgz`). The
 * project's lock is its own when it has one (an earlier install's), else
 * the repository's; either way each tarball's entry is written into it.
 */
export function npmInstallOffline(dir: string, dependencies: Record<string, string>): void {
  const pkgFile = path.join(dir, "package.json");
  const pkg = readJson<{ name: string; dependencies?: Record<string, string> }>(pkgFile);
  const tarballs = Object.entries(dependencies).filter(([, spec]) => spec.endsWith(".tgz"));
  pkg.dependencies = {
    ...pkg.dependencies,
    ...dependencies,
    ...Object.fromEntries(tarballs.map(([name, tgz]) => [name, `file:${path.relative(dir, tgz)}`])),
  };
  writeFileSync(pkgFile, JSON.stringify(pkg, null, 2));

  const lockFile = path.join(dir, "package-lock.json");
  writeFileSync(
    lockFile,
    offlineLock(
      dir,
      { name: pkg.name, dependencies: pkg.dependencies },
      Object.fromEntries(tarballs),
      existsSync(lockFile) ? lockFile : undefined,
    ),
  );

  const r = spawnSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error"], {
    cwd: dir,
    env: { ...process.env, ...NO_REGISTRY_ENV },
    encoding: "utf8",
    timeout: 600_000,
  });
  if (r.error !== undefined) throw r.error;
  if (r.status !== 0)
    throw new Error(`npm install --offline in ${dir} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
}

/**
 * The packages the lock of the project at `dir` places at a version the
 * repository's lock pins nowhere, as `name@version` (local tarballs aside):
 * what an offline install found only because something else put it in the
 * cache, and a machine whose cache only `npm ci` filled would lack.
 */
export function unpinnedPackages(dir: string): string[] {
  const pinned = new Set<string>();
  const placed = (lock: Lock) =>
    Object.entries(lock.packages)
      .filter(([where, entry]) => where !== "" && !String(entry.resolved ?? "").startsWith("file:"))
      .map(
        ([where, entry]) =>
          `${where.slice(where.lastIndexOf("node_modules/") + "node_modules/".length)}@${String(entry.version)}`,
      );
  for (const p of placed(readJson<Lock>(path.join(repoRoot, "package-lock.json")))) pinned.add(p);
  return placed(readJson<Lock>(path.join(dir, "package-lock.json"))).filter((p) => !pinned.has(p));
}
