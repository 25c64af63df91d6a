import { describe, expect, it } from "vitest";
import {
  type Classified,
  classify,
  type GcInput,
  type ManagedDomain,
  type StackRef,
  type StackState,
  type StateResource,
  stackKey,
  stacksToRead,
} from "../../../provider/gc/classify";
import { sampleMetadata } from "../kvm/fixtures";

const NOW = new Date("2026-11-29T12:00:00.000Z");
const MIN = 60_000;
const URN = (stack: string, name: string, project = "infra") =>
  `urn:pulumi:${stack}::${project}::pulumi-nodejs:dynamic:KvmProxy::${name}`;

/** A managed domain `name` on host `lab`, owned by project/stack/resource, created `ageMin` minutes before NOW. */
function domain(
  name: string,
  owner: { project?: string; stack?: string; resource?: string } = {},
  ageMin = 60,
): ManagedDomain {
  const project = owner.project ?? "infra";
  const stack = owner.stack ?? "prod";
  return {
    host: "lab",
    name,
    uuid: `uuid-${name}`,
    providerId: `kvm://lab/${name}`,
    metadata: sampleMetadata({
      owner: { project, stack, urn: URN(stack, owner.resource ?? name, project) },
      createdAt: new Date(NOW.getTime() - ageMin * MIN).toISOString(),
    }),
  };
}

const ref = (stack: string, project = "infra"): StackRef => ({
  project,
  stack,
  ref: project === "infra" ? stack : `organization/${project}/${stack}`,
});

const read = (resources: StateResource[]): StackState => ({ kind: "read", resources, pending: [] });

interface Case {
  name: string;
  domain: ManagedDomain;
  stacks?: StackRef[] | { error: string };
  states?: Record<string, StackState>;
  allProjects?: boolean;
  minAgeMin?: number;
  verdict: Classified["verdict"];
  reason: RegExp;
}

const cases: Case[] = [
  {
    name: "held: the owner stack holds the URN with this domain's ID",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: { "infra/prod": read([{ urn: URN("prod", "web-1"), id: "kvm://lab/web-1" }]) },
    verdict: "held",
    reason: /^held$/,
  },
  {
    name: "held: moved by an alias (to the plugin's type), the resource records the owner its VM names",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: {
      "infra/prod": read([
        {
          urn: "urn:pulumi:prod::infra::kvmproxy:index:KvmProxy::web-1",
          id: "kvm://lab/web-1",
          ownerUrn: URN("prod", "web-1"),
        },
      ]),
    },
    verdict: "held",
    reason: /^held$/,
  },
  {
    name: "orphan: the owner stack no longer exists",
    domain: domain("web-1", { stack: "gone" }),
    stacks: [ref("prod")],
    verdict: "orphan",
    reason: /^stack no longer exists$/,
  },
  {
    name: "orphan: the URN is not in its stack",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: { "infra/prod": read([{ urn: URN("prod", "other"), id: "kvm://lab/web-1" }]) },
    verdict: "orphan",
    reason: /^URN not in stack prod$/,
  },
  {
    name: "orphan: the stack holds the URN with another domain's ID (replaced)",
    domain: domain("web-1-aaaa", { resource: "web-1" }),
    stacks: [ref("prod")],
    states: { "infra/prod": read([{ urn: URN("prod", "web-1"), id: "kvm://lab/web-1-bbbb" }]) },
    verdict: "orphan",
    reason: /holds this URN as kvm:\/\/lab\/web-1-bbbb$/,
  },
  {
    name: "held: the old VM of a replace the stack still has to delete",
    domain: domain("web-1-aaaa", { resource: "web-1" }),
    stacks: [ref("prod")],
    states: {
      "infra/prod": read([
        { urn: URN("prod", "web-1"), id: "kvm://lab/web-1-bbbb" },
        { urn: URN("prod", "web-1"), id: "kvm://lab/web-1-aaaa", delete: true },
      ]),
    },
    verdict: "held",
    reason: /marked for deletion/,
  },
  {
    name: "unknown: the same domain name under another host key",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: { "infra/prod": read([{ urn: URN("prod", "web-1"), id: "kvm://lab-old-key/web-1" }]) },
    verdict: "unknown",
    reason: /another host key/,
  },
  {
    name: "unknown: the URN is held without an ID",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: { "infra/prod": read([{ urn: URN("prod", "web-1") }]) },
    verdict: "unknown",
    reason: /without an ID/,
  },
  {
    name: "held: a pending create for the URN (an interrupted up)",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: {
      "infra/prod": {
        kind: "read",
        resources: [],
        pending: [{ urn: URN("prod", "web-1"), type: "creating" }],
      },
    },
    verdict: "held",
    reason: /^pending creating operation in stack prod$/,
  },
  {
    name: "orphan: a pending operation for another URN does not hold it",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: {
      "infra/prod": {
        kind: "read",
        resources: [],
        pending: [{ urn: URN("prod", "web-2"), type: "creating" }],
      },
    },
    verdict: "orphan",
    reason: /^URN not in stack prod$/,
  },
  {
    name: "unknown: the stack's state cannot be read",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: { "infra/prod": { kind: "unreadable", error: "decrypt failed" } },
    verdict: "unknown",
    reason: /could not be read: decrypt failed/,
  },
  {
    name: "unknown: an existing stack whose state was never read",
    domain: domain("web-1"),
    stacks: [ref("prod")],
    states: {},
    verdict: "unknown",
    reason: /was not read/,
  },
  {
    name: "unknown: the stacks could not be listed",
    domain: domain("web-1", { stack: "gone" }),
    stacks: { error: "backend unreachable" },
    verdict: "unknown",
    reason: /stacks could not be listed: backend unreachable/,
  },
  {
    name: "other-project: a domain of another project is not judged",
    domain: domain("web-1", { project: "crawler", stack: "gone" }),
    stacks: [ref("prod")],
    verdict: "other-project",
    reason: /belongs to project crawler/,
  },
  {
    name: "orphan: another project's domain with --all-projects",
    domain: domain("web-1", { project: "crawler", stack: "gone" }),
    stacks: [ref("prod"), ref("dev", "crawler")],
    allProjects: true,
    verdict: "orphan",
    reason: /^stack no longer exists$/,
  },
  {
    name: "held: another project's held domain with --all-projects",
    domain: domain("web-1", { project: "crawler", stack: "dev" }),
    stacks: [ref("prod"), ref("dev", "crawler")],
    states: {
      "crawler/dev": read([{ urn: URN("dev", "web-1", "crawler"), id: "kvm://lab/web-1" }]),
    },
    allProjects: true,
    verdict: "held",
    reason: /^held$/,
  },
  {
    name: "too-young: an orphan younger than the minimum age",
    domain: domain("web-1", {}, 5),
    stacks: [ref("prod")],
    states: { "infra/prod": read([]) },
    minAgeMin: 15,
    verdict: "too-young",
    reason: /younger than the minimum age; URN not in stack prod/,
  },
  {
    name: "orphan: exactly the minimum age",
    domain: domain("web-1", {}, 15),
    stacks: [ref("prod")],
    states: { "infra/prod": read([]) },
    minAgeMin: 15,
    verdict: "orphan",
    reason: /^URN not in stack prod$/,
  },
  {
    name: "too-young: a creation time in the future (clock skew)",
    domain: domain("web-1", { stack: "gone" }, -3),
    stacks: [ref("prod")],
    minAgeMin: 0,
    verdict: "too-young",
    reason: /stack no longer exists/,
  },
  {
    name: "held: a young domain its stack holds stays held",
    domain: domain("web-1", {}, 1),
    stacks: [ref("prod")],
    states: { "infra/prod": read([{ urn: URN("prod", "web-1"), id: "kvm://lab/web-1" }]) },
    minAgeMin: 15,
    verdict: "held",
    reason: /^held$/,
  },
];

function input(c: Pick<Case, "stacks" | "states" | "allProjects" | "minAgeMin">, domains: ManagedDomain[]) {
  return {
    domains,
    project: "infra",
    allProjects: c.allProjects ?? false,
    minAgeMs: (c.minAgeMin ?? 0) * MIN,
    now: NOW,
    stacks: c.stacks ?? [],
    states: new Map(Object.entries(c.states ?? {})),
  } satisfies GcInput;
}

describe("classify", () => {
  it.each(cases)("$name", (c) => {
    const [got] = classify(input(c, [c.domain]));
    expect(got?.verdict).toBe(c.verdict);
    expect(got?.reason).toMatch(c.reason);
    expect(got?.domain).toBe(c.domain);
  });

  it.each([
    ["another backend's", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "unknown-backend"],
    ["a domain of this backend", "aaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaa", "orphan"],
    ["a domain recorded before backends were (no backend)", undefined, "aaaaaaaaaaaaaaaa", "orphan"],
    ["a backend this run cannot tell", "aaaaaaaaaaaaaaaa", undefined, "unknown-backend"],
  ] as const)("judges %s stack only when it is this run's backend", (_what, theirs, ours, verdict) => {
    const d = domain("web-1", { stack: "gone" });
    if (theirs !== undefined) d.metadata.owner.backend = theirs;
    const [got] = classify({ ...input({}, [d]), ...(ours !== undefined ? { backend: ours } : {}) });
    expect(got?.verdict).toBe(verdict);
    if (verdict === "unknown-backend") expect(got?.reason).toMatch(/another Pulumi backend.*not judged/);
  });

  it("reports each domain's age from its metadata", () => {
    const [got] = classify(input({}, [domain("web-1", { stack: "gone" }, 90)]));
    expect(got?.ageMs).toBe(90 * MIN);
  });

  it("keeps the order of the domains and judges each on its own", () => {
    const domains = [domain("a", { stack: "gone" }), domain("b"), domain("c", { project: "x" })];
    const got = classify(
      input(
        {
          stacks: [ref("prod")],
          states: { "infra/prod": read([{ urn: URN("prod", "b"), id: "kvm://lab/b" }]) },
        },
        domains,
      ),
    );
    expect(got.map((r) => [r.domain.name, r.verdict])).toEqual([
      ["a", "orphan"],
      ["b", "held"],
      ["c", "other-project"],
    ]);
  });
});

describe("stacksToRead", () => {
  it("names only existing stacks that own an in-scope domain", () => {
    const domains = [
      domain("a"),
      domain("b", { stack: "dev" }),
      domain("c", { stack: "gone" }),
      domain("d", { project: "crawler", stack: "dev" }),
    ];
    const stacks = [ref("prod"), ref("dev"), ref("unused"), ref("dev", "crawler")];
    const base = { domains, project: "infra", stacks };
    expect(stacksToRead({ ...base, allProjects: false }).map((s) => s.ref)).toEqual(["prod", "dev"]);
    expect(stacksToRead({ ...base, allProjects: true }).map((s) => s.ref)).toEqual([
      "prod",
      "dev",
      "organization/crawler/dev",
    ]);
  });

  it("names none when the stacks could not be listed", () => {
    expect(
      stacksToRead({ domains: [domain("a")], project: "infra", allProjects: false, stacks: { error: "x" } }),
    ).toEqual([]);
  });

  it("keys stacks by project and name", () => {
    expect(stackKey("infra", "prod")).toBe("infra/prod");
  });
});
