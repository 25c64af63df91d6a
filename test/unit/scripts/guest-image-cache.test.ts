/**
 * Where scripts/guest-image keeps its images, and when it builds one again:
 * in the machine's cache (shared by every checkout, so a fresh clone finds
 * them), under a name that changes only with the recipe, and again once the
 * image is older than the age limit. `where` and `cached` answer without
 * building, so these run in a temporary cache with an empty file standing in
 * for the image.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

const SCRIPT = path.resolve(__dirname, "../../../scripts/guest-image");
const DAY_MS = 86_400_000;

let home: string;
beforeEach(() => {
  home = mkdtempSync(path.join(os.tmpdir(), "kvmp-image-cache-"));
});
afterEach(() => rmSync(home, { recursive: true, force: true }));

/** Runs the script with only the environment given (plus PATH and HOME). */
function guestImage(
  args: string[],
  env: Record<string, string> = {},
): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(SCRIPT, args, {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, ...env },
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout.trim(), stderr: r.stderr };
}

/** An empty file where the recipe's image would be, last written `ageDays` ago. */
function placeImage(env: Record<string, string>, ageDays: number): string {
  const file = guestImage(["where"], env).stdout;
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, "");
  const when = new Date(Date.now() - ageDays * DAY_MS);
  utimesSync(file, when, when);
  return file;
}

/** A case of where the images go: its title, the environment, the folder expected. */
type Where = [string, Record<string, string>, () => string];

describe("where the images are kept", () => {
  it.each<Where>([
    ["the user's cache by default", {}, () => path.join(home, ".cache/pulumi-kvm-proxy/images")],
    ["XDG_CACHE_HOME when set", { XDG_CACHE_HOME: "/srv/xdg" }, () => "/srv/xdg/pulumi-kvm-proxy/images"],
    [
      "KVMP_CACHE_DIR over both",
      { XDG_CACHE_HOME: "/srv/xdg", KVMP_CACHE_DIR: "/srv/kvmp" },
      () => "/srv/kvmp/images",
    ],
    [
      "KVMP_GUEST_IMAGE_DIR outright",
      { KVMP_CACHE_DIR: "/srv/kvmp", KVMP_GUEST_IMAGE_DIR: "/srv/img" },
      () => "/srv/img",
    ],
  ])("%s", (_, env, folder) => {
    const r = guestImage(["where"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(path.dirname(r.stdout)).toBe(folder());
    expect(path.basename(r.stdout)).toMatch(/^kvmp-guest-[0-9a-f]{12}\.qcow2$/);
  });

  it("names each variant and release apart, and the name does not depend on the folder", () => {
    const envs: Record<string, string>[] = [
      {},
      { KVMP_GUEST_VARIANT: "stock" },
      { KVMP_GUEST_VARIANT: "stock", KVMP_GUEST_SUITE: "trixie" },
    ];
    const names = envs.map((env) => path.basename(guestImage(["where"], env).stdout));
    expect(new Set(names).size).toBe(3);
    expect(path.basename(guestImage(["where"], { KVMP_CACHE_DIR: "/elsewhere" }).stdout)).toBe(names[0]);
  });
});

describe("when the cached image is used as it is", () => {
  it.each([
    ["missing", undefined, {}, 1],
    ["a day old", 1, {}, 0],
    ["six days old", 6, {}, 0],
    ["eight days old (the default limit is 7)", 8, {}, 1],
    ["eight days old with a limit of 10", 8, { KVMP_GUEST_IMAGE_MAX_AGE_DAYS: "10" }, 0],
    [
      "eight days old with an empty limit (unset: the default 7)",
      8,
      { KVMP_GUEST_IMAGE_MAX_AGE_DAYS: "" },
      1,
    ],
    ["a year old with the limit off (0)", 365, { KVMP_GUEST_IMAGE_MAX_AGE_DAYS: "0" }, 0],
  ] as const)("%s", (_, ageDays, extra, code) => {
    const env = { KVMP_CACHE_DIR: path.join(home, "cache"), ...extra };
    if (ageDays !== undefined) placeImage(env, ageDays);
    expect(guestImage(["cached"], env).code).toBe(code);
  });

  it("`path` prints a cached image that is young enough without building anything", () => {
    const env = { KVMP_CACHE_DIR: path.join(home, "cache") };
    const file = placeImage(env, 2);
    const r = guestImage(["path"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(file);
    expect(r.stderr).not.toContain("building");
  });

  it.each(["-1", "7d", " 3"])("refuses an age limit of %j, naming the variable", (value) => {
    const r = guestImage(["cached"], { KVMP_GUEST_IMAGE_MAX_AGE_DAYS: value });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("KVMP_GUEST_IMAGE_MAX_AGE_DAYS must be a whole number of days");
  });
});
