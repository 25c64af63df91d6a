import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../../provider/errors";
import {
  buildMetaData,
  buildSeedIso,
  ISO_SECTOR_BYTES,
  MAX_SEED_FILE_BYTES,
  type SeedIsoFiles,
} from "../../../../provider/kvm/guest/seed-iso";

// Independent readers check the image: genisoimage's isoinfo (Rock Ridge,
// Joliet and plain ISO 9660 views), xorriso (libisofs), util-linux blkid (how
// cloud-init finds the seed), and a reader in this file that follows the
// rules of Linux fs/isofs/rock.c.

const workDir = mkdtempSync(path.join(tmpdir(), "seed-iso-test-"));
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

let counter = 0;
function writeIso(files: SeedIsoFiles): string {
  const file = path.join(workDir, `seed-${counter++}.iso`);
  writeFileSync(file, buildSeedIso(files));
  return file;
}

function run(cmd: string, args: string[]): Buffer {
  return execFileSync(cmd, args, { maxBuffer: 64 * 1024 * 1024, stdio: ["ignore", "pipe", "pipe"] });
}

/** Names in an `isoinfo -l` listing (the last column), without `.` and `..`. */
function isoinfoNames(iso: string, view: "-R" | "-J" | "plain"): string[] {
  const args = ["-l", "-i", iso];
  if (view !== "plain") args.unshift(view);
  return run("isoinfo", args)
    .toString("utf8")
    .split("\n")
    .filter((line) => /^[d-][rwx-]{9}/.test(line))
    .map((line) => line.replace(/^.*\]\s+/, "").trimEnd())
    .filter((name) => name !== "." && name !== "..");
}

const pseudoRandom = (bytes: number): Buffer => {
  const chunks: Buffer[] = [];
  let block = Buffer.from("seed");
  for (let n = 0; n < bytes; n += 32) {
    block = createHash("sha256").update(block).digest();
    chunks.push(block);
  }
  return Buffer.concat(chunks).subarray(0, bytes);
};

const META = buildMetaData({ instanceId: "iid-kvmp-a-0001", localHostname: "kvmp-a" });
const ALL_FILES = ["meta-data", "network-config", "user-data", "vendor-data"];

describe("buildSeedIso: what readers see", () => {
  const iso = writeIso({
    metaData: META,
    userData: "#cloud-config\npackages: [squid]\n",
    vendorData: "#!/bin/sh\necho vendor\n",
    networkConfig: "version: 2\nethernets: {}\n",
  });

  it("is labelled cidata and carries Rock Ridge and Joliet (isoinfo -d)", () => {
    const info = run("isoinfo", ["-d", "-i", iso]).toString("utf8");
    expect(info).toMatch(/^Volume id: cidata$/m);
    expect(info).toMatch(/Rock Ridge signatures version 1 found/);
    expect(info).toMatch(/Joliet with UCS level 3 found/);
    expect(info).toMatch(/^Logical block size is: 2048$/m);
  });

  it("has the Joliet volume id cidata in UCS-2 too", () => {
    const image = readFileSync(iso);
    const svd = image.subarray(17 * ISO_SECTOR_BYTES, 18 * ISO_SECTOR_BYTES);
    expect(svd[0]).toBe(2);
    expect(svd.subarray(1, 6).toString("ascii")).toBe("CD001");
    expect(svd.subarray(88, 91).toString("ascii")).toBe("%/E");
    expect(svd.subarray(40, 52).swap16().toString("utf16le")).toBe("cidata");
  });

  it("is found by the label cloud-init looks for (blkid LABEL=cidata)", () => {
    expect(run("blkid", ["-p", "-o", "value", "-s", "LABEL", iso]).toString("utf8").trim()).toBe("cidata");
    expect(run("blkid", ["-p", "-o", "value", "-s", "TYPE", iso]).toString("utf8").trim()).toBe("iso9660");
  });

  it.each([
    ["Rock Ridge", "-R"],
    ["Joliet", "-J"],
  ] as const)("lists the four files under their real names through %s (isoinfo %s -l)", (_, view) => {
    expect(isoinfoNames(iso, view)).toEqual(ALL_FILES);
  });

  it("keeps valid ISO 9660 level 1 names in the primary tree", () => {
    expect(isoinfoNames(iso, "plain")).toEqual(["META_DAT.;1", "NETWORK_.;1", "USER_DAT.;1", "VENDOR_D.;1"]);
  });

  it("shows read-only regular files owned by root with the fixed 1970-01-01 timestamp", () => {
    const listing = run("isoinfo", ["-R", "-l", "-i", iso]).toString("utf8");
    const userData = listing.split("\n").find((line) => line.endsWith(" user-data "));
    expect(userData).toMatch(/^-r--r--r-- +1 +0 +0 +\d+ Jan {2}1 1970 /);
  });

  it("is read by xorriso (libisofs) without warnings, listing the four files", () => {
    const out = execFileSync(
      "xorriso",
      ["-return_with", "WARNING", "32", "-indev", iso, "-find", "/", "-type", "f"],
      { stdio: ["ignore", "pipe", "pipe"] },
    ).toString("utf8");
    expect(
      out
        .split("\n")
        .filter((l) => l.startsWith("'"))
        .sort(),
    ).toEqual(ALL_FILES.map((f) => `'/${f}'`));
  });

  it("resolves names the way Linux fs/isofs does (SP in root '.', RR flags gate NM)", () => {
    const files = readLikeLinuxIsofs(readFileSync(iso));
    expect([...files.keys()]).toEqual(ALL_FILES);
    expect(files.get("user-data")?.toString("utf8")).toBe("#cloud-config\npackages: [squid]\n");
  });

  it("records the volume size in the descriptors and is a whole number of sectors", () => {
    const image = readFileSync(iso);
    expect(image.length % ISO_SECTOR_BYTES).toBe(0);
    const pvd = 16 * ISO_SECTOR_BYTES;
    expect(image.readUInt32LE(pvd + 80) * ISO_SECTOR_BYTES).toBe(image.length);
    expect(image.readUInt32BE(pvd + 84) * ISO_SECTOR_BYTES).toBe(image.length);
    expect(image.subarray(pvd + 813, pvd + 829).toString("ascii")).toBe("1970010100000000");
    expect(image[18 * ISO_SECTOR_BYTES]).toBe(255); // set terminator
  });
});

describe("buildSeedIso: contents come back byte for byte", () => {
  const gz = gzipSync(Buffer.from("#cloud-config\nruncmd: [echo hi]\n"), { level: 9 });
  const cases: Array<[string, SeedIsoFiles]> = [
    ["empty vendor-data", { metaData: META, userData: "#cloud-config\n", vendorData: "" }],
    [
      "gzip user-data (binary)",
      { metaData: META, userData: gz, vendorData: Buffer.from([0, 255, 0x1f, 0x8b]) },
    ],
    [
      "multi-KiB files crossing sector boundaries",
      {
        metaData: META,
        userData: pseudoRandom(300 * 1024 + 7),
        vendorData: pseudoRandom(ISO_SECTOR_BYTES),
        networkConfig: pseudoRandom(ISO_SECTOR_BYTES + 1),
      },
    ],
    [
      "UTF-8 non-ASCII text",
      {
        metaData: META,
        userData: "#cloud-config\nwrite_files:\n- content: 'héllo ✓ 你好 🚀'\n",
        networkConfig: "é",
      },
    ],
    ["CRLF line endings", { metaData: META, userData: "#!/bin/sh\r\necho hi\r\n", vendorData: "a\r\nb\r" }],
    ["empty user-data", { metaData: META, userData: "" }],
  ];

  const fileNames = {
    metaData: "meta-data",
    userData: "user-data",
    vendorData: "vendor-data",
    networkConfig: "network-config",
  } as const;

  it.each(cases)(
    "%s: isoinfo -R -x, isoinfo -J -x, xorriso and the isofs reader return the inputs",
    (_, files) => {
      const iso = writeIso(files);
      const linux = readLikeLinuxIsofs(readFileSync(iso));
      for (const key of Object.keys(fileNames) as Array<keyof typeof fileNames>) {
        const name = fileNames[key];
        const input = files[key];
        if (input === undefined) {
          expect(linux.has(name)).toBe(false);
          continue;
        }
        const expected = typeof input === "string" ? Buffer.from(input, "utf8") : input;
        expect(run("isoinfo", ["-R", "-i", iso, "-x", `/${name}`]).equals(expected), `-R ${name}`).toBe(true);
        expect(run("isoinfo", ["-J", "-i", iso, "-x", `/${name}`]).equals(expected), `-J ${name}`).toBe(true);
        const out = path.join(workDir, `extract-${counter++}`);
        run("xorriso", ["-osirrox", "on", "-indev", iso, "-extract", `/${name}`, out]);
        expect(readFileSync(out).equals(expected), `xorriso ${name}`).toBe(true);
        expect(linux.get(name)?.equals(expected), `isofs ${name}`).toBe(true);
      }
    },
  );

  it("omits vendor-data and network-config when they are not given", () => {
    const iso = writeIso({ metaData: META, userData: "#cloud-config\n" });
    expect(isoinfoNames(iso, "-R")).toEqual(["meta-data", "user-data"]);
    expect(isoinfoNames(iso, "-J")).toEqual(["meta-data", "user-data"]);
  });
});

describe("buildSeedIso: determinism and limits", () => {
  const files: SeedIsoFiles = { metaData: META, userData: "#cloud-config\n", vendorData: "#!/bin/sh\n" };

  it("gives byte-identical images for the same inputs", () => {
    expect(buildSeedIso(files).equals(buildSeedIso({ ...files }))).toBe(true);
  });

  it.each([
    ["user-data", { ...files, userData: "#cloud-config\n#" }],
    ["meta-data", { ...files, metaData: buildMetaData({ instanceId: "iid-2", localHostname: "kvmp-a" }) }],
    ["vendor-data", { ...files, vendorData: "#!/bin/sh\n\n" }],
    ["vendor-data omitted", { metaData: files.metaData, userData: files.userData }],
    ["network-config added", { ...files, networkConfig: "version: 2\n" }],
  ])("gives a different image when %s changes", (_, changed) => {
    expect(buildSeedIso(changed).equals(buildSeedIso(files))).toBe(false);
  });

  it("accepts a file of exactly MAX_SEED_FILE_BYTES", () => {
    const image = buildSeedIso({ metaData: META, userData: Buffer.alloc(MAX_SEED_FILE_BYTES, 0x61) });
    expect(image.length).toBeGreaterThan(MAX_SEED_FILE_BYTES);
  });

  it.each([
    ["user-data", { userData: Buffer.alloc(MAX_SEED_FILE_BYTES + 1) }],
    ["meta-data", { metaData: "x".repeat(MAX_SEED_FILE_BYTES + 1) }],
    ["vendor-data", { vendorData: Buffer.alloc(MAX_SEED_FILE_BYTES + 1) }],
    // 2-byte UTF-8 characters: the limit counts encoded bytes, not characters.
    ["network-config", { networkConfig: "é".repeat(MAX_SEED_FILE_BYTES / 2 + 1) }],
  ])("rejects %s over the limit with a permanent error naming the file", (name, override) => {
    let caught: unknown;
    try {
      buildSeedIso({ ...files, ...override });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ProviderError);
    expect((caught as ProviderError).kind).toBe("permanent");
    expect((caught as ProviderError).message).toContain(`seed file ${name} `);
    expect((caught as ProviderError).message).toContain(String(MAX_SEED_FILE_BYTES));
  });
});

describe("buildMetaData", () => {
  it("writes instance-id and local-hostname as quoted YAML", () => {
    expect(buildMetaData({ instanceId: "iid-kvmp-a-0001", localHostname: "kvmp-a" })).toBe(
      'instance-id: "iid-kvmp-a-0001"\nlocal-hostname: "kvmp-a"\n',
    );
  });

  it.each([
    ["plain", "iid-1"],
    ["YAML-looking", "1.10"],
    ["quotes and backslashes", 'a "b" \\c'],
    ["YAML indicators", "- [x]: {y} # z &a *b !c |"],
    ["non-ASCII and astral characters", "é-✓-🚀"],
    ["a line separator (U+2028 breaks lines in YAML 1.1)", "a\u2028b"],
  ])("round-trips an instance id that is %s through PyYAML (cloud-init's parser)", (_, instanceId) => {
    const doc = buildMetaData({ instanceId, localHostname: "vm.example.com" });
    expect(/^[\x20-\x7e\n]*$/.test(doc)).toBe(true);
    const parsed = JSON.parse(
      execFileSync(
        "python3",
        ["-c", "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read())))"],
        {
          input: doc,
        },
      ).toString("utf8"),
    );
    expect(parsed).toEqual({ "instance-id": instanceId, "local-hostname": "vm.example.com" });
  });

  it.each([
    ["an empty instance id", { instanceId: "", localHostname: "vm" }],
    ["a newline in the instance id", { instanceId: "a\nb", localHostname: "vm" }],
    ["a DEL in the instance id", { instanceId: "a\x7f", localHostname: "vm" }],
    ["an unpaired surrogate in the instance id", { instanceId: "a\ud800", localHostname: "vm" }],
    ["an empty hostname", { instanceId: "i", localHostname: "" }],
    ["a hostname with an underscore", { instanceId: "i", localHostname: "my_vm" }],
    ["a hostname starting with a hyphen", { instanceId: "i", localHostname: "-vm" }],
    ["a hostname with an empty label", { instanceId: "i", localHostname: "vm..example" }],
    ["a 64-character label", { instanceId: "i", localHostname: "a".repeat(64) }],
    [
      "a hostname over 253 characters",
      { instanceId: "i", localHostname: `${"a".repeat(63)}.`.repeat(4).concat("a") },
    ],
  ])("rejects %s as a permanent error", (_, input) => {
    expect(() => buildMetaData(input)).toThrow(ProviderError);
    try {
      buildMetaData(input);
    } catch (err) {
      expect((err as ProviderError).kind).toBe("permanent");
    }
  });
});

/**
 * Reads the primary tree's root the way Linux fs/isofs does with Rock Ridge
 * enabled: the SUSP `SP` entry of the root's `.` record gives the skip length,
 * an `RR` entry without the NM bit hides `NM` names, `NM` pieces concatenate,
 * `CE` continues the entries elsewhere, and a record without a Rock Ridge
 * name falls back to the ISO 9660 name lower-cased without `;1`.
 */
function readLikeLinuxIsofs(image: Buffer): Map<string, Buffer> {
  const sector = ISO_SECTOR_BYTES;
  const pvd = image.subarray(16 * sector, 17 * sector);
  if (pvd[0] !== 1 || pvd.subarray(1, 6).toString("ascii") !== "CD001")
    throw new Error("no primary descriptor");
  const rootExtent = pvd.readUInt32LE(156 + 2);
  const rootSize = pvd.readUInt32LE(156 + 10);

  const records: Buffer[] = [];
  for (let s = 0; s < rootSize / sector; s++) {
    const block = image.subarray((rootExtent + s) * sector, (rootExtent + s + 1) * sector);
    for (let off = 0; off < sector && (block[off] ?? 0) > 0; off += block[off] ?? 0) {
      records.push(block.subarray(off, off + (block[off] ?? 0)));
    }
  }
  const systemUse = (r: Buffer): Buffer => {
    const idLength = r[32] ?? 0;
    let start = 33 + idLength;
    if (start % 2 === 1) start++;
    return r.subarray(start);
  };
  const entries = function* (su: Buffer): Generator<[string, Buffer]> {
    let area: Buffer | undefined = su;
    while (area) {
      let continuation: Buffer | undefined;
      for (let off = 0; off + 4 <= area.length; ) {
        const len = area[off + 2] ?? 0;
        if (len < 4) break;
        const sig = area.subarray(off, off + 2).toString("latin1");
        const entry = area.subarray(off, off + len);
        if (sig === "CE") {
          const at = entry.readUInt32LE(4) * sector + entry.readUInt32LE(12);
          continuation = image.subarray(at, at + entry.readUInt32LE(20));
        }
        yield [sig, entry];
        off += len;
      }
      area = continuation;
    }
  };

  const [dot, , ...files] = records;
  if (!dot) throw new Error("empty root");
  const dotEntries = [...entries(systemUse(dot))];
  const sp = dotEntries.find(([sig]) => sig === "SP")?.[1];
  if (sp?.[4] !== 0xbe || sp[5] !== 0xef) throw new Error("no SUSP SP entry in the root '.' record");
  const skip = sp[6] ?? 0;
  if (
    !dotEntries.some(([sig, e]) => sig === "ER" && e.subarray(8, 8 + (e[4] ?? 0)).toString() === "RRIP_1991A")
  ) {
    throw new Error("no Rock Ridge ER entry");
  }

  const result = new Map<string, Buffer>();
  for (const record of files) {
    let name = "";
    let nmAllowed = true;
    for (const [sig, e] of entries(systemUse(record).subarray(skip))) {
      if (sig === "RR" && ((e[4] ?? 0) & 0x08) === 0) nmAllowed = false;
      if (sig === "NM" && nmAllowed && e.length >= 5 && ((e[4] ?? 0) & ~1) === 0) {
        name += e.subarray(5).toString("latin1");
      }
    }
    if (!name) {
      name = record
        .subarray(33, 33 + (record[32] ?? 0))
        .toString("latin1")
        .replace(/;1$/, "")
        .toLowerCase();
    }
    const extent = record.readUInt32LE(2);
    const size = record.readUInt32LE(10);
    result.set(name, image.subarray(extent * sector, extent * sector + size));
  }
  return result;
}
