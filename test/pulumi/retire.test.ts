/**
 * Retiring on demand through the real Pulumi CLI: `pulumi-kvm-proxy retire`
 * and `block` write the stack config (kvm:retire, kvm:blockedAddresses),
 * the next preview shows the replacement and why, `up` makes it before it
 * deletes the old VM, and a blocked address is not handed out again while
 * the block lasts, even where the pool's order would give it next. A fleet
 * of three on a pool of six addresses of the test host's static bridge
 * (three held, two blocked, one for a replacement made first); nothing
 * boots (an empty image): the booted replacements are
 * test/guest/egress-fleet.test.ts's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allocate } from "../../provider/kvm/network/address-pool";
import { staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  DELETE_FIRST,
  hostsConfig,
  MAKE_BEFORE_BREAK,
  packageCli,
  removeByHand,
  stepsOf,
  TEST_PROXY_ARGS,
  Workspace,
} from "./harness";

const FLEET = `rt${process.pid}`;
const RANGE = "192.0.2.120-192.0.2.125/24";
const POOL = ["192.0.2.120", "192.0.2.121", "192.0.2.122", "192.0.2.123", "192.0.2.124", "192.0.2.125"];

let host: TestHost;
let ws: Workspace;

function cli(...args: string[]) {
  return packageCli(ws, [...args, "--cwd", ws.dir, "--stack", ws.stack]);
}

/** The members as the state records them: name → domain and pool address. */
function members(): Record<string, { domain: string; address: string }> {
  return Object.fromEntries(
    ws.proxies().map((p) => {
      const o = p.outputs ?? {};
      const nic = (o.nics as { addresses: string[] }[] | undefined)?.[0];
      return [
        String(p.urn).replace(/.*::/, ""),
        { domain: String(o.domainName), address: (nic?.addresses[0] ?? "").replace(/\/24$/, "") },
      ];
    }),
  );
}

/** What `preview --json` plans per member: its op (members not listed are unchanged). */
function planned(): Record<string, string> {
  const r = ws.mustRun("preview", "--json");
  const steps = (JSON.parse(r.stdout) as { steps?: { op: string; urn: string }[] }).steps ?? [];
  return Object.fromEntries(
    steps.filter((s) => s.urn.includes("KvmProxy::")).map((s) => [s.urn.replace(/.*::/, ""), s.op]),
  );
}

/** `up --json`: the member's steps, in order, with the keys a replace names. */
function upSteps(member: string): string[] {
  return stepsOf(ws.mustRun("up", "--yes", "--skip-preview", "--json").stdout, member);
}

/** The stack's fleets: the fleet of three, and any more a test adds. */
function fleets(more: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    "fleet:fleets": {
      [FLEET]: {
        size: 3,
        hosts: ["local"],
        proxy: {
          image: "tiny",
          ...TEST_PROXY_ARGS,
          nics: [
            { bridge: staticBridgeOf(host).name, addressPool: { ranges: [RANGE] }, gateway4: "192.0.2.1" },
          ],
        },
      },
      ...more,
    },
  };
}

beforeAll(() => {
  host = testHost();
  ws = new Workspace("retire", { name: "kvmpt-retire", main: "test/pulumi/programs/fleet" });
  ws.setConfig({ ...hostsConfig(host), ...fleets() });
  ws.up();
}, 600_000);

afterAll(() => {
  const left = ws === undefined ? [] : Object.values(members()).map((m) => m.domain);
  ws?.cleanup();
  for (const d of left) removeByHand(host, d);
});

describe("retire and block, through the stack config", () => {
  it("retire refuses a proxy the stack does not have, and writes nothing", () => {
    const r = cli("retire", "nosuch", "--reason", "typo");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`has no proxy named "nosuch" (its proxies: ${FLEET}-`);
    expect(ws.mustRun("config", "--json").stdout).not.toContain("retire");
  });

  it("retire: preview shows the member replaced and why, up makes the replacement before it deletes the old VM, and the entry is spent", () => {
    const before = members();
    const name = `${FLEET}-1`;
    const r = cli("retire", name, "--reason", "blocked by example.com");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`kvm:retire["${name}"] set: the next \`pulumi up\` replaces ${name}`);
    const entry = JSON.parse(ws.mustRun("config", "get", "kvm:retire", "--json").stdout) as {
      objectValue: Record<string, { reason: string; before: string }>;
    };
    expect(entry.objectValue[name]?.reason).toBe("blocked by example.com");
    expect(Date.parse(entry.objectValue[name]?.before as string)).toBeLessThanOrEqual(Date.now());
    expect(planned()).toEqual({ [name]: "replace" });
    const shown = ws.mustRun("preview", "--diff");
    expect(shown.output).toContain(`replacing: retired (kvm:retire.${name}): blocked by example.com`);
    expect(upSteps(name)).toEqual(MAKE_BEFORE_BREAK("retire"));
    const after = members();
    expect(after[name]?.domain).not.toBe(before[name]?.domain);
    expect(allDomains(host)).not.toContain(before[name]?.domain);
    expect(after[`${FLEET}-0`]).toEqual(before[`${FLEET}-0`]);
    // The replacement is younger than the entry: nothing more to do, though the entry stays.
    expect(planned()).toEqual({});
  });

  it("a reason that begins with a dash is written as given, not taken for a flag", () => {
    const name = `${FLEET}-2`;
    const r = cli("retire", name, "--reason=--looks-like-a-flag");
    expect(r.code, r.stderr).toBe(0);
    const entry = JSON.parse(ws.mustRun("config", "get", "kvm:retire", "--json").stdout) as {
      objectValue: Record<string, { reason: string }>;
    };
    expect(entry.objectValue[name]?.reason).toBe("--looks-like-a-flag");
    ws.mustRun("config", "rm", "--path", `kvm:retire["${name}"]`);
  });

  it("block refuses a period that would write an entry the provider cannot read, and writes nothing", () => {
    const before = ws.mustRun("config", "--json").stdout;
    const r = cli("block", members()[`${FLEET}-0`]?.address as string, "--reason", "x", "--for", "3000000d");
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("the entry would not be read: kvm:blockedAddresses.");
    expect(ws.mustRun("config", "--json").stdout).toBe(before);
  });

  it("keeps a map written as JSON text, drops blocks that are over, and refuses to write beside an entry preview refuses", () => {
    const name = `${FLEET}-2`;
    const over = { reason: "over", since: "2026-01-01T00:00:00Z", until: "2026-01-08T00:00:00Z" };
    const text = { "198.51.100.9": over, "198.51.100.10": { ...over, until: "2999-01-01T00:00:00Z" } };
    ws.mustRun("config", "set", "kvm:blockedAddresses", JSON.stringify(text));
    try {
      const address = members()[name]?.address as string;
      const r = cli("block", address, "--reason", "kept beside", "--for", "1h");
      expect(r.code, r.stderr).toBe(0);
      const map = JSON.parse(ws.mustRun("config", "get", "kvm:blockedAddresses", "--json").stdout) as {
        objectValue: Record<string, unknown>;
      };
      expect(Object.keys(map.objectValue).sort()).toEqual(["198.51.100.10", address].sort());
      // An entry preview refuses is named, and nothing is written.
      ws.mustRun("config", "set", "--path", 'kvm:blockedAddresses["198.51.100.10"].until', "soon");
      const before = ws.mustRun("config", "--json").stdout;
      // Another map's entries are its own: retire still writes.
      expect(cli("retire", name, "--reason", "x").code).toBe(0);
      const blocked = cli("block", address, "--reason", "again", "--for", "1h");
      expect(blocked.code).toBe(1);
      expect(blocked.stderr).toContain(
        "kvm:blockedAddresses holds entries preview refuses; fix them first: kvm:blockedAddresses.198.51.100.10.until: must be a time",
      );
      expect(JSON.parse(ws.mustRun("config", "--json").stdout)["kvm:blockedAddresses"]).toEqual(
        JSON.parse(before)["kvm:blockedAddresses"],
      );
    } finally {
      ws.mustRun("config", "rm", "kvm:blockedAddresses");
      ws.mustRun("config", "rm", "--path", `kvm:retire["${name}"]`);
    }
  });

  it("block refuses an address no member holds nor any pool has", () => {
    const r = cli("block", "198.51.100.7", "--reason", "x", "--for", "7d");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("no proxy of stack");
  });

  it("block: the member holding the address is replaced, and the pool never hands it out while blocked, though its order would", () => {
    const before = members();
    const name = `${FLEET}-0`;
    const address = before[name]?.address as string;
    const r = cli("block", address, "--reason", "403s from example.com", "--for", "7d");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`replaces ${name}`);
    expect(planned()).toEqual({ [name]: "replace" });
    expect(upSteps(name)).toEqual(MAKE_BEFORE_BREAK("blockedAddresses"));
    const mid = members();
    expect(mid[name]?.address).not.toBe(address);
    // Now retire another member. Whatever order the members took their addresses in, the address the
    // pool's order gives next (blocks aside) is blocked too: the replacement must skip both.
    const other = Object.keys(mid).find((n) => n !== name) as string;
    const held = new Set(Object.values(mid).map((m) => m.address));
    const next = (
      (allocate({ ranges: [RANGE] }, held) as { addresses: string[] }).addresses[0] as string
    ).replace(/\/24$/, "");
    if (next !== address)
      expect(cli("block", next, "--reason", "next in the pool", "--for", "1d").code).toBe(0);
    expect(cli("retire", other, "--reason", "make room").code).toBe(0);
    expect(upSteps(other)).toEqual(MAKE_BEFORE_BREAK("retire"));
    const after = members();
    expect([address, next]).not.toContain(after[other]?.address);
    expect(POOL).toContain(after[other]?.address);
    for (const b of [address, next]) expect(Object.values(after).map((m) => m.address)).not.toContain(b);
    expect(planned()).toEqual({});
  });

  it("block an address the program gives (a static address): its holder is replaced once, and the replacement, holding it again, is not replaced at every up", () => {
    const solo = `${FLEET}s`;
    const address = "192.0.2.126";
    const proxy = { image: "tiny", ...TEST_PROXY_ARGS };
    const nics = [{ bridge: staticBridgeOf(host).name, addresses: [`${address}/24`], gateway4: "192.0.2.1" }];
    ws.setConfig(fleets({ [solo]: { size: 1, hosts: ["local"], proxy: { ...proxy, nics } } }));
    const member = `${solo}-0`;
    try {
      ws.up();
      const before = members()[member]?.domain;
      const r = cli("block", address, "--reason", "403s from example.com", "--for", "1d");
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`note: ${member} hold ${address} by the program`);
      expect(planned()).toEqual({ [member]: "replace" });
      // A static address collides: the old VM goes first.
      expect(upSteps(member)).toEqual(DELETE_FIRST("blockedAddresses"));
      expect(members()[member]?.domain).not.toBe(before);
      expect(members()[member]?.address).toBe(address);
      // The replacement was made after the block: holding the address again is the program's doing.
      expect(planned()).toEqual({});
    } finally {
      ws.mustRun("config", "rm", "--path", `kvm:blockedAddresses["${address}"]`);
      ws.setConfig(fleets());
      ws.up();
    }
  });

  it("a config entry that does not parse fails preview naming it, and changes nothing", () => {
    ws.mustRun("config", "set", "--path", "kvm:retire.x.reason", "r");
    ws.mustRun("config", "set", "--path", "kvm:retire.x.before", "tomorrow");
    try {
      const r = ws.run("preview");
      expect(r.code).not.toBe(0);
      expect(r.output).toContain("kvm:retire.x.before: must be a time");
    } finally {
      ws.mustRun("config", "rm", "--path", "kvm:retire.x");
    }
  });
});
