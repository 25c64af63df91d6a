/**
 * The KvmProxy resource: a KVM VM running an HTTP forward proxy on one of
 * the libvirt hosts named in the stack config `kvm:hosts`.
 *
 * The provider object handed to Pulumi is deliberately tiny: each method
 * requires the implementation by package path inside the dynamic provider
 * process. Pulumi serializes this object into every resource's state as
 * `__provider`; this way that text is a few hundred bytes, holds no absolute
 * path (the same program gives the same text on every machine), captures no
 * secret, and upgrading the package changes the behaviour without changing
 * the text. The methods are arrow functions that return the implementation's
 * promise: no async/await (a TypeScript downlevel to an older target would
 * capture its `__awaiter` helper), no `this`, no method shorthand.
 */
import * as pulumi from "@pulumi/pulumi";
import { mayCarryKeyMaterial } from "../kvm/config/host-config";
import { KVM_PROXY_TYPE, type KvmProxyArgs, SECRET_OUTPUTS } from "./args";
import { hashedProxyBlock, isPlain, urlWithCredentials } from "./proxy-auth";

/** The module the serialized provider requires: resolved from the program's folder. */
export const PROVIDER_MODULE = "pulumi-kvm-proxy/dist/provider/resource/provider";

/** The serialized provider: delegates every call to {@link PROVIDER_MODULE}. */
export const serializedProvider: pulumi.dynamic.ResourceProvider = {
  configure: (req) => require("pulumi-kvm-proxy/dist/provider/resource/provider").configure(req),
  check: (olds, news) => require("pulumi-kvm-proxy/dist/provider/resource/provider").check(olds, news),
  diff: (id, olds, news) => require("pulumi-kvm-proxy/dist/provider/resource/provider").diff(id, olds, news),
  create: (inputs) => require("pulumi-kvm-proxy/dist/provider/resource/provider").create(inputs),
  read: (id, props) => require("pulumi-kvm-proxy/dist/provider/resource/provider").read(id, props),
  update: (id, olds, news) =>
    require("pulumi-kvm-proxy/dist/provider/resource/provider").update(id, olds, news),
  delete: (id, props) => require("pulumi-kvm-proxy/dist/provider/resource/provider").delete(id, props),
};

/**
 * A KVM VM running an HTTP forward proxy.
 *
 * ```ts
 * const edge = new KvmProxy("edge-1", { host: "lab", image: "debian-12" });
 * export const url = edge.proxyUrl;
 * ```
 *
 * Changing host, image (or the `kvm:images` entry behind its key),
 * userData, vendorData, installGuestAgent, memoryMiB, vcpus, diskGiB,
 * network, bridge, macAddress, name or proxyPort rebuilds the VM; tags,
 * healthCheck, egressCheck, waitForIp, timeouts and keepOnFailure update in
 * place. A VM kept after a failed create (`keepOnFailure`) is rebuilt by the
 * next `up`.
 */
export class KvmProxy extends pulumi.dynamic.Resource {
  declare readonly domainName: pulumi.Output<string>;
  declare readonly uuid: pulumi.Output<string>;
  /** The host it lives on: the one given, or the one placement chose from a pool. */
  declare readonly host: pulumi.Output<string>;
  /** A pooled proxy's pool. */
  declare readonly hostPool: pulumi.Output<string[] | undefined>;
  /** When the VM was made (ISO 8601): what rotation measures age from. */
  declare readonly createdAt: pulumi.Output<string | undefined>;
  /** The baked volume on the host the disk is backed by, when the image has `bake` in kvm:images. */
  declare readonly bakedImage: pulumi.Output<string | undefined>;
  /** The guest's first routable IPv4; absent until known. */
  declare readonly ipAddress: pulumi.Output<string | undefined>;
  declare readonly macAddress: pulumi.Output<string>;
  /** `http://<ip>:<port>` (`https://` with `proxy.tls`), never with credentials; absent until the IP is known. */
  declare readonly proxyUrl: pulumi.Output<string | undefined>;
  /** With `proxy.tls` and a CA: the CA the proxy's certificate is issued by (PEM), what clients trust. */
  declare readonly proxyCaCertificate: pulumi.Output<string | undefined>;
  /**
   * `http://<user>:<password>@<ip>:<port>` when the proxy has auth (secret).
   * Made here, in the program, from `proxyUrl` and the password input: no
   * provider output carries the password, so no engine or SDK log can.
   */
  readonly proxyUrlWithCredentials: pulumi.Output<string | undefined>;
  /** `socks5://<ip>:<port>` when `proxy.socks` is set, never with credentials; absent until the IP is known. */
  declare readonly socksUrl: pulumi.Output<string | undefined>;
  /**
   * `socks5://<user>:<password>@<ip>:<port>` when the proxy has SOCKS and
   * auth (secret), made here in the program like `proxyUrlWithCredentials`.
   */
  readonly socksUrlWithCredentials: pulumi.Output<string | undefined>;
  /** The address `egressCheck.url` saw the proxy's requests come from (last create, update or refresh). */
  declare readonly egressAddress: pulumi.Output<string | undefined>;
  /** The proxy's last probe: `{ok, checkedAt, reason}`. */
  declare readonly health: pulumi.Output<{ ok: boolean; checkedAt: string; reason?: string } | undefined>;
  /** provisioning | running | degraded (the VM runs, its proxy failed the last probe) | stopped | failed. */
  declare readonly state: pulumi.Output<string>;
  /** Set when a failed create kept the VM for inspection (`keepOnFailure`): `{failedAt, reason}`. */
  declare readonly keptAfterFailure: pulumi.Output<{ failedAt: string; reason: string } | undefined>;
  declare readonly name: pulumi.Output<string>;
  declare readonly proxyPort: pulumi.Output<number>;
  declare readonly memoryMiB: pulumi.Output<number>;
  declare readonly vcpus: pulumi.Output<number>;
  declare readonly diskGiB: pulumi.Output<number>;
  declare readonly tags: pulumi.Output<Record<string, string>>;
  /** The image reference as given (a key of kvm:images, or a URL / inline image). */
  declare readonly image: pulumi.Output<string | Record<string, unknown>>;

  constructor(name: string, args: KvmProxyArgs, opts?: pulumi.CustomResourceOptions) {
    const props: Record<string, unknown> = { ...args };
    let urn: Promise<string> | undefined;
    if (opts?.id === undefined) {
      // The URN goes through a plain promise on purpose: an Output derived
      // from a component parent's urn carries a dependency on that parent,
      // and depending on a component means waiting for all its children,
      // this proxy included: a deadlock as soon as a component has two.
      urn = new Promise<string>((resolve) => {
        pulumi.createUrn(name, KVM_PROXY_TYPE, opts?.parent).apply((u) => {
          resolve(u);
          return u;
        });
      });
      props.owner = urn.then((u) => ({
        project: pulumi.getProject(),
        stack: pulumi.getStack(),
        urn: u,
        resource: name,
      }));
    }
    for (const k of [
      "domainName",
      "uuid",
      "ipAddress",
      "macAddress",
      "proxyUrl",
      "proxyCaCertificate",
      "socksUrl",
      "egressAddress",
      "health",
      "state",
      "keptAfterFailure",
      "host",
      "hostPool",
      "createdAt",
      "bakedImage",
      "name",
      "proxyPort",
      "memoryMiB",
      "vcpus",
      "diskGiB",
      "tags",
      "image",
    ]) {
      if (props[k] === undefined) props[k] = undefined;
    }
    warnPlainPassword(args.proxy, name);
    if (args.host !== undefined) props.host = secretIfKeyed(args.host);
    if (args.proxy !== undefined && urn !== undefined) props.proxy = hashedProxy(args.proxy, urn, name);
    // The inputs are stored in the state beside the outputs: marking only the
    // outputs secret would leave the plaintext in the inputs section.
    for (const k of SECRET_OUTPUTS) {
      if (props[k] !== undefined) props[k] = pulumi.secret(props[k]);
    }
    const secrets = [...new Set([...(opts?.additionalSecretOutputs ?? []), ...SECRET_OUTPUTS])];
    super(
      serializedProvider,
      name,
      props,
      { ...opts, additionalSecretOutputs: secrets },
      undefined,
      "KvmProxy",
    );
    this.proxyUrlWithCredentials = withCredentials(this.proxyUrl, args.proxy);
    this.socksUrlWithCredentials = withCredentials(this.socksUrl, args.proxy);
  }

  /**
   * Adopts an existing VM read-only by its provider ID (`kvm://<host>/<domain>`):
   * its inputs are rebuilt from the VM's metadata. `pulumi import` does not
   * work for dynamic providers; this does.
   */
  static get(name: string, id: pulumi.Input<string>, opts?: pulumi.CustomResourceOptions): KvmProxy {
    return new KvmProxy(name, {} as KvmProxyArgs, { ...opts, id });
  }
}

type ProxyArg = NonNullable<KvmProxyArgs["proxy"]>;

/**
 * `host`, secret when it is a host given in full with key material (a
 * private key or passphrase, its own or a jump host's): the state's inputs
 * then hold it encrypted, whether or not the program passed those as secrets.
 */
function secretIfKeyed(host: KvmProxyArgs["host"]): pulumi.Output<unknown> {
  return pulumi.output(host).apply((h) => (mayCarryKeyMaterial(h) ? pulumi.secret(h) : h));
}

/**
 * Warns (once, on the resource's name) when the program passed the password
 * as a plain string: it then sits in the program's source or plain config.
 */
function warnPlainPassword(proxy: unknown, name: string): void {
  if (!isPlain(proxy) || pulumi.Output.isInstance(proxy)) return;
  const auth = proxy.auth;
  if (!isPlain(auth) || pulumi.Output.isInstance(auth)) return;
  if (typeof auth.password === "string") {
    pulumi.log.warn(
      `KvmProxy ${name}: proxy.auth.password is a plain string; pass a secret (pulumi config set --secret, config.requireSecret) so it is encrypted in your config too`,
    );
  }
}

/**
 * The proxy block the provider gets (proxy-auth.ts): the password replaced
 * by its hash; secret whenever it has auth or TLS (check adds the CA made
 * for the proxy, its key included, and the engine keeps what check returns
 * as secret as the input it came from). Warns at every run when it admits
 * public clients without auth.
 */
function hashedProxy(
  proxy: pulumi.Input<ProxyArg>,
  urn: Promise<string>,
  name: string,
): pulumi.Output<unknown> {
  return pulumi.all([pulumi.output(proxy), urn]).apply(([p, u]) => {
    const block = p as unknown;
    if (isPlain(block) && block.publicClientsWithoutAuth === true && block.auth === undefined) {
      pulumi.log.warn(
        `KvmProxy ${name}: proxy.publicClientsWithoutAuth is set: the public ranges of allowedClients use this proxy without any password; anyone who can send from them can`,
      );
    }
    const hashed = hashedProxyBlock(block, u);
    return isPlain(block) && (block.auth !== undefined || block.tls !== undefined)
      ? pulumi.secret(hashed)
      : hashed;
  });
}

/** `proxyUrl` with the credentials of `proxy.auth`, secret; undefined without auth or an address. */
function withCredentials(
  proxyUrl: pulumi.Output<string | undefined>,
  proxy: KvmProxyArgs["proxy"],
): pulumi.Output<string | undefined> {
  const auth = pulumi.output(proxy).apply((p) => (p as unknown as Record<string, unknown> | undefined)?.auth);
  return pulumi.secret(
    pulumi.all([proxyUrl, auth]).apply(([url, a]) => urlWithCredentials(url, a as unknown)),
  );
}
