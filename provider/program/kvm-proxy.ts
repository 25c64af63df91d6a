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
import { KVM_PROXY_TYPE, type KvmProxyArgs } from "../resource/args";
import { CLASS_OUTPUTS, type ClassOutputName, SECRET_OUTPUTS } from "../resource/kvm-proxy-properties";
import type { KvmProxyOutputs } from "../resource/outputs";
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
 * The provider's outputs the class exposes (kvm-proxy-properties.ts
 * CLASS_OUTPUTS), each an Output of its type in KvmProxyOutputs, whose
 * TSDoc they carry.
 */
type ProviderOutputs = {
  readonly [K in keyof Pick<KvmProxyOutputs, ClassOutputName>]-?: pulumi.Output<
    // biome-ignore lint/complexity/noBannedTypes: `{} extends Pick<T, K>` is how an optional property is told
    {} extends Pick<KvmProxyOutputs, K> ? KvmProxyOutputs[K] | undefined : KvmProxyOutputs[K]
  >;
};

export interface KvmProxy extends ProviderOutputs {}

/**
 * A KVM VM running an HTTP forward proxy.
 *
 * ```ts
 * const edge = new KvmProxy("edge-1", { host: "lab", image: "debian-12" });
 * export const url = edge.proxyUrl;
 * ```
 *
 * Changing an input that replaces (so marked in the package's reference and
 * its schema; the image also when the `kvm:images` entry behind its key
 * changes) rebuilds the VM; the other inputs update it in place. A VM kept after a failed create
 * (`keepOnFailure`) is rebuilt by the next `up`.
 */
// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the outputs are declared by the property registry, and the engine sets each one (a key of the props)
export class KvmProxy extends pulumi.dynamic.Resource {
  /**
   * `http://<user>:<password>@<ip>:<port>` when the proxy has auth (secret).
   * Made here, in the program, from `proxyUrl` and the password input: no
   * provider output carries the password, so no engine or SDK log can.
   */
  readonly proxyUrlWithCredentials: pulumi.Output<string | undefined>;
  /**
   * `socks5://<user>:<password>@<ip>:<port>` when the proxy has SOCKS and
   * auth (secret), made here in the program like `proxyUrlWithCredentials`.
   */
  readonly socksUrlWithCredentials: pulumi.Output<string | undefined>;

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
    // Each output the class exposes is a key of its props: the engine resolves only those.
    for (const k of CLASS_OUTPUTS) {
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
