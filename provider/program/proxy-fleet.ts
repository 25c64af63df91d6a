/**
 * ProxyFleet: `size` proxies sharing one set of arguments, placed over a
 * pool of hosts by capacity (placement happens in the provider at create,
 * see kvm/placement/placement.ts) and rotated in batches.
 *
 * Member `i` is the KvmProxy `<fleet>-<i>`: identities are stable, so growing
 * the fleet adds members at the end, adding a host to the pool moves no
 * member (a pooled proxy stays where it was placed), and removing a host
 * replaces only the members placed on it. Shrinking deletes the highest
 * members.
 */
import * as pulumi from "@pulumi/pulumi";
import { poolCapacity } from "../kvm/network/address-pool";
import { hostPoolCapacity, type PoolHost } from "../kvm/network/host-pools";
import { sharedEgress } from "../probes/egress";
import type { HostInput, KvmProxyArgs, ProxyInput } from "../resource/args";
import { candidateHosts } from "../resource/check-placement";
import { readStackConfig } from "../resource/stack-config";
import { KvmProxy } from "./kvm-proxy";
import { memberProxyBlock } from "./proxy-auth";

export const PROXY_FLEET_TYPE = "kvmproxy:index:ProxyFleet";

/**
 * Most members a fleet has: each is a resource of the stack, diffed and saved
 * in its checkpoint at every `up`, and a thousand VMs already fill many hosts;
 * a larger fleet is several fleets (or stacks).
 */
export const MAX_FLEET_SIZE = 1000;

/** Why `size` cannot be a fleet's size, or undefined. */
export function fleetSizeProblem(size: unknown): string | undefined {
  if (typeof size !== "number" || !Number.isInteger(size) || size < 0 || size > MAX_FLEET_SIZE) {
    const got = typeof size === "number" ? String(size) : typeof size;
    return `size must be an integer from 0 to ${MAX_FLEET_SIZE} (a larger fleet is several fleets), got ${got}`;
  }
  return undefined;
}

/** The arguments of `new ProxyFleet(name, args)`. */
export interface ProxyFleetArgs {
  /** How many proxies, 0 to 1000 (a plain number: members are separate resources). */
  size: number;
  /**
   * The pool members are placed over: keys of the stack config `kvm:hosts`,
   * or hosts given in full (`{key, uri, ...}`, e.g. from the resources that
   * make them), or both.
   */
  hosts: pulumi.Input<pulumi.Input<string | HostInput>[]>;
  /**
   * What every member gets (image, memoryMiB, proxy block, ...); tags gain
   * `fleet` and `member`. With `memberPasswords`, `proxy.auth` has the
   * username only.
   */
  proxy: Omit<KvmProxyArgs, "host" | "name" | "rotation" | "macAddress" | "proxy"> & {
    proxy?: pulumi.Input<ProxyInput<FleetProxyAuth>>;
  };
  /**
   * Replace members older than `maxAge` ("7d", "12h"), at most `batch`
   * (default 1) per `up`, oldest first; each replacement is created (and
   * passes its health check) before its predecessor is deleted.
   */
  rotation?: { maxAge: string | number; batch?: number };
  /**
   * A password of its own for each member, derived from `secret` (at least
   * 16 characters; HMAC-SHA-256 of the member's name) instead of
   * `proxy.auth.password`, which is then left out (`proxy.auth.username` is
   * every member's): a leaked crawler config opens one member only. The
   * same secret gives the same passwords at every run; a new secret
   * replaces every member. `urlsWithCredentials` carries each member's.
   */
  memberPasswords?: MemberPasswords;
}

/** The credentials of every member: the password is left out with `memberPasswords`. */
export interface FleetProxyAuth {
  /** 1-64 letters, digits, '.', '_' or '-': every member's. */
  username: pulumi.Input<string>;
  /** Every member's password (at least 12 characters, secret); left out with `memberPasswords`. */
  password?: pulumi.Input<string> | undefined;
}

/** Per-member passwords derived from one secret. */
export interface MemberPasswords {
  /** At least 16 characters; each member's password is HMAC-SHA-256 of its name under it. */
  secret: pulumi.Input<string>;
}

/** What the fleet reads of a member: the outputs it gathers. */
export interface FleetMember {
  readonly id: pulumi.Output<string>;
  readonly proxyUrl: pulumi.Output<string | undefined>;
  readonly proxyUrlWithCredentials: pulumi.Output<string | undefined>;
  readonly socksUrl: pulumi.Output<string | undefined>;
  readonly socksUrlWithCredentials: pulumi.Output<string | undefined>;
  readonly host: pulumi.Output<string>;
  readonly egressAddress: pulumi.Output<string | undefined>;
}

/**
 * Makes member `name` from its arguments: the dynamic KvmProxy in a
 * program, the plugin's own resource of type `kvmproxy:index:KvmProxy`
 * when the provider plugin constructs the fleet.
 */
export type NewMember<M extends FleetMember> = (
  name: string,
  args: KvmProxyArgs,
  opts: pulumi.CustomResourceOptions,
) => M;

const dynamicMember: NewMember<KvmProxy> = (name, args, opts) => new KvmProxy(name, args, opts);

/**
 * `size` proxies sharing one set of arguments, placed over a pool of hosts
 * by capacity and rotated in batches; member `i` is the KvmProxy
 * `<fleet>-<i>`.
 */
export class ProxyFleet<M extends FleetMember = KvmProxy> extends pulumi.ComponentResource {
  /** The members, in order. */
  readonly proxies: M[];
  /** The members' provider IDs (`kvm://<host>/<domain>`). */
  readonly ids: pulumi.Output<string[]>;
  /** The members' proxy URLs, without credentials. */
  readonly urls: pulumi.Output<(string | undefined)[]>;
  /** The members' URLs with credentials when the proxy block has auth (secret). */
  readonly urlsWithCredentials: pulumi.Output<(string | undefined)[]>;
  /** The members' SOCKS5 URLs (`proxy.proxy.socks`), without credentials. */
  readonly socksUrls: pulumi.Output<(string | undefined)[]>;
  /** The members' SOCKS5 URLs with credentials (secret). */
  readonly socksUrlsWithCredentials: pulumi.Output<(string | undefined)[]>;
  /** The host each member was placed on. */
  readonly hosts: pulumi.Output<string[]>;
  /**
   * The address each member's egress check saw (`proxy.egressCheck`); members
   * sharing one are warned about, by name.
   */
  readonly egressAddresses: pulumi.Output<(string | undefined)[]>;

  constructor(
    name: string,
    args: ProxyFleetArgs,
    opts?: pulumi.ComponentResourceOptions,
    /** How a member is made (default: the dynamic KvmProxy). */
    newMember: NewMember<M> = dynamicMember as unknown as NewMember<M>,
  ) {
    // Judged before super: nothing registers, neither the component nor a member.
    const size = args.size;
    const sizeProblem = fleetSizeProblem(size);
    if (sizeProblem !== undefined) throw new pulumi.RunError(`ProxyFleet ${name}: ${sizeProblem}`);
    super(PROXY_FLEET_TYPE, name, {}, opts);
    const room = poolRoomProblem(args.proxy.nics, size, args.rotation?.batch ?? 1, fleetHosts(args.hosts));
    if (room !== undefined) throw new pulumi.RunError(`ProxyFleet ${name}: ${room}`);
    const pool = pulumi.output(args.hosts).apply((hosts) => [...hosts]);
    const rotation = args.rotation;
    this.proxies = [];
    for (let i = 0; i < size; i++) {
      const tags = pulumi
        .output(args.proxy.tags ?? {})
        .apply((t) => ({ ...t, fleet: name, member: String(i) }));
      const member = `${name}-${i}`;
      const memberPasswords = args.memberPasswords;
      // Without memberPasswords, check at preview refuses an auth without a password, as for any proxy.
      const proxy =
        memberPasswords === undefined
          ? { proxy: args.proxy.proxy as KvmProxyArgs["proxy"] }
          : {
              proxy: pulumi.secret(
                pulumi.all([args.proxy.proxy, memberPasswords.secret]).apply(([block, secret]) => {
                  const r = memberProxyBlock(block, secret, member);
                  if ("problem" in r) throw new pulumi.RunError(`ProxyFleet ${name}: ${r.problem}`);
                  return r.block as NonNullable<KvmProxyArgs["proxy"]>;
                }),
              ),
            };
      this.proxies.push(
        newMember(
          member,
          {
            ...args.proxy,
            ...proxy,
            host: { pool },
            tags,
            ...(rotation !== undefined
              ? { rotation: { maxAge: rotation.maxAge, batch: rotation.batch ?? 1, group: name, size } }
              : {}),
          },
          { parent: this },
        ),
      );
    }
    this.ids = pulumi.all(this.proxies.map((p) => p.id));
    this.urls = pulumi.all(this.proxies.map((p) => p.proxyUrl));
    this.urlsWithCredentials = pulumi.secret(pulumi.all(this.proxies.map((p) => p.proxyUrlWithCredentials)));
    this.socksUrls = pulumi.all(this.proxies.map((p) => p.socksUrl));
    this.socksUrlsWithCredentials = pulumi.secret(
      pulumi.all(this.proxies.map((p) => p.socksUrlWithCredentials)),
    );
    this.hosts = pulumi.all(this.proxies.map((p) => p.host));
    this.egressAddresses = pulumi.all(this.proxies.map((p) => p.egressAddress)).apply((addresses) => {
      const members = addresses.map((a, i) => ({ name: `${name}-${i}`, egressAddress: a }));
      for (const w of sharedEgress(members)) pulumi.log.warn(`ProxyFleet ${name}: ${w}`, this);
      return addresses;
    });
    this.registerOutputs({
      ids: this.ids,
      urls: this.urls,
      urlsWithCredentials: this.urlsWithCredentials,
      socksUrls: this.socksUrls,
      socksUrlsWithCredentials: this.socksUrlsWithCredentials,
      hosts: this.hosts,
      egressAddresses: this.egressAddresses,
    });
  }
}

/**
 * The fleet's hosts as the stack config and the arguments give them, when
 * they are plain values and each is known and valid (else undefined: check
 * judges each member then).
 */
function fleetHosts(hosts: unknown): PoolHost[] | undefined {
  if (!Array.isArray(hosts) || hosts.some((h) => pulumi.Output.isInstance(h))) return undefined;
  const config = readStackConfig((k) => pulumi.runtime.getConfig(k));
  return candidateHosts({ pool: hosts }, config);
}

/**
 * Why the fleet's address pools are too small, or undefined: every member
 * holds an address of each pool NIC, and a replacement (a rotation batch,
 * or any change that rebuilds a member) takes its new one before its
 * predecessor lets go. A pool named on the hosts (`addressPool: "<name>"`)
 * counts the sum of the fleet's hosts' pools of that name (`hosts`): the
 * members spread over them. Judged when the NICs (and hosts) are plain
 * values (preview knows them); check judges each member's pool too.
 */
export function poolRoomProblem(
  nics: unknown,
  size: number,
  batch: number,
  hosts?: readonly PoolHost[],
): string | undefined {
  if (!Array.isArray(nics)) return undefined;
  for (const [i, nic] of nics.entries()) {
    const pool = (nic as { addressPool?: unknown } | undefined)?.addressPool;
    const ranges = (pool as { ranges?: unknown } | undefined)?.ranges;
    let room: bigint;
    let what: string;
    if (typeof pool === "string" && hosts !== undefined) {
      room = hostPoolCapacity(pool, hosts);
      what = `${JSON.stringify(pool)} of hosts ${hosts.map((h) => h.key).join(", ")} holds in all`;
    } else if (Array.isArray(ranges) && ranges.every((r) => typeof r === "string")) {
      room = poolCapacity({ ranges: ranges as string[] });
      what = "holds";
    } else continue;
    if (room > 0n && room < BigInt(size + batch)) {
      return `nics[${i}].addressPool ${what} ${room} addresses per family; ${size} members and a batch of ${batch} replacements need ${size + batch}`;
    }
  }
  return undefined;
}
