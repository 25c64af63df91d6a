/**
 * Construct: ProxyFleet as a component the engine asks the provider plugin
 * to build (`kvmproxy:index:ProxyFleet`), for programs in any language.
 * The Node.js SDK's own provider server does these steps for the providers
 * it serves; ours serves the gRPC service itself (server.ts), so they are
 * done here with the SDK's runtime, which a component needs to declare its
 * members:
 *
 * 1. point the runtime at the engine's monitor and the stack's config;
 * 2. the inputs as a program would have them: secrets (also nested ones)
 *    as secret Outputs, inputs that depend on other resources as Outputs;
 * 3. the component's constructor, whose members are the plugin's own
 *    KvmProxy (plugin-kvm-proxy.ts), registered like a program's resources
 *    and handed back to this provider by the engine;
 * 4. the reply: the component's URN and its outputs (members as resource
 *    references) once every registration is done.
 *
 * The runtime's debug lines are not forwarded: they print every output of
 * a member, secrets in plain text.
 *
 * `size` and `rotation` must be plain values: the members are separate
 * resources, counted at preview. A block given as one Output (it depends
 * on another resource) is read field by field.
 */
import { createRequire } from "node:module";
import * as pulumi from "@pulumi/pulumi";
import { ProxyFleet, type ProxyFleetArgs } from "../program/proxy-fleet";
import type { KvmProxyArgs } from "../resource/args";
import { PROXY_FLEET_TOKEN } from "../schema/properties";
import { PACKAGE } from "../schema/type-spec";
import { PluginKvmProxy } from "./plugin-kvm-proxy";
import { servedSchemaSpec } from "./served-schema";

// biome-ignore lint/suspicious/noExplicitAny: the SDK's runtime modules are untyped JavaScript here
type Untyped = any;

interface Runtime {
  settings: Untyped;
  config: Untyped;
  state: Untyped;
  rpc: Untyped;
  server: Untyped;
  resource: Untyped;
}

let runtime: Runtime | undefined;

/** The SDK's runtime modules of the @pulumi/pulumi this package resolves (the one its resources use). */
function sdk(): Runtime {
  if (runtime === undefined) {
    const r = createRequire(require.resolve("@pulumi/pulumi"));
    // The runtime's debug lines print every output of each member it registers, the URLs with
    // credentials in plain text: this process forwards none of them to the engine.
    r("./log").debug = () => Promise.resolve();
    runtime = {
      settings: r("./runtime/settings"),
      config: r("./runtime/config"),
      state: r("./runtime/state"),
      rpc: r("./runtime/rpc"),
      server: r("./provider/server"),
      resource: r("./resource"),
    };
  }
  return runtime;
}

/** A resource's URN (the SDK's internal promise of its Output: a URN is never unknown). */
const urnOf = (r: pulumi.Resource): Promise<string> => (r.urn as Untyped).promise();

/** `v` with every secret the engine sent (nested ones too) as a secret Output. */
export function withSecretOutputs(
  v: unknown,
  isSecret: (x: unknown) => boolean,
  unwrap: (x: unknown) => unknown,
): unknown {
  if (isSecret(v))
    return pulumi.secret(withSecretOutputs(unwrap(v), isSecret, unwrap) as pulumi.Input<unknown>);
  if (Array.isArray(v)) return v.map((x) => withSecretOutputs(x, isSecret, unwrap));
  if (v === null || typeof v !== "object" || pulumi.Output.isInstance(v) || pulumi.Resource.isInstance(v))
    return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withSecretOutputs(x, isSecret, unwrap)]));
}

/** A block given as one Output, as an object of one Output per field; anything else as it is. */
export function fieldsOf(v: unknown, fields: readonly string[]): unknown {
  if (!pulumi.Output.isInstance(v)) return v;
  const whole = v as pulumi.Output<Record<string, unknown> | undefined>;
  return Object.fromEntries(fields.map((f) => [f, whole.apply((o) => o?.[f])]));
}

/** The fields of the fleet's `proxy` block (the served schema's FleetProxy). */
function fleetProxyFields(): string[] {
  return Object.keys(servedSchemaSpec().types[`${PACKAGE}:index:FleetProxy`]?.properties ?? {});
}

/** The fleet's arguments from the deserialized inputs: why not, when a count is not a plain value. */
export function fleetArgs(inputs: Record<string, unknown>, proxyFields: readonly string[]): ProxyFleetArgs {
  const plain = (name: string) => {
    if (pulumi.Output.isInstance(inputs[name])) {
      throw new Error(
        `ProxyFleet: ${name} must be a plain value (known at preview: the members are separate resources), not the output of another resource or a secret`,
      );
    }
    return inputs[name];
  };
  const rotation = plain("rotation");
  return {
    size: plain("size") as number,
    hosts: inputs.hosts as ProxyFleetArgs["hosts"],
    proxy: (fieldsOf(inputs.proxy, proxyFields) ?? {}) as ProxyFleetArgs["proxy"],
    ...(rotation !== undefined ? { rotation: rotation as NonNullable<ProxyFleetArgs["rotation"]> } : {}),
    ...(inputs.memberPasswords !== undefined
      ? { memberPasswords: fieldsOf(inputs.memberPasswords, ["secret"]) as ProxyFleetArgs["memberPasswords"] }
      : {}),
  };
}

/**
 * Builds the component a ConstructRequest names and answers with the
 * ConstructResponse (`pb`: the generated provider messages). Runs in an
 * async-local runtime state of its own, as the SDK's server does.
 */
export function construct(
  req: Untyped,
  pb: Untyped,
  structs: Untyped,
  engineAddress: string,
): Promise<Untyped> {
  const s = sdk();
  return s.state.withLocalStorage(async () => {
    const type: string = req.getType();
    const name: string = req.getName();
    if (type !== PROXY_FLEET_TOKEN) throw new Error(`unknown component type ${type}`);
    s.settings.resetOptions(
      req.getProject(),
      req.getStack(),
      req.getParallel(),
      engineAddress,
      req.getMonitorendpoint(),
      req.getDryrun(),
      req.getOrganization(),
    );
    await s.settings.awaitFeatureSupport();
    s.config.setAllConfig(Object.fromEntries(req.getConfigMap().entries()), req.getConfigsecretkeysList());

    const raw = (await s.server.deserializeInputs(req.getInputs(), req.getInputdependenciesMap())) as Record<
      string,
      unknown
    >;
    const inputs = withSecretOutputs(raw, s.rpc.isRpcSecret, s.rpc.unwrapRpcSecret) as Record<
      string,
      unknown
    >;
    const providers: Record<string, pulumi.ProviderResource> = {};
    for (const [pkg, ref] of req.getProvidersMap().entries()) {
      providers[pkg] = new s.resource.DependencyProviderResource(ref);
    }
    const parent: string = req.getParent();
    const opts: pulumi.ComponentResourceOptions = {
      providers,
      dependsOn: (req.getDependenciesList() as string[]).map((urn) => new s.resource.DependencyResource(urn)),
      protect: req.getProtect(),
      aliases: (req.getAliasesList() as Untyped[]).filter((a) => a.hasUrn()).map((a) => a.getUrn() as string),
      ...(parent !== "" ? { parent: new s.resource.DependencyResource(parent) } : {}),
    };
    const fleet = new ProxyFleet<PluginKvmProxy>(
      name,
      fleetArgs(inputs, fleetProxyFields()),
      opts,
      (member: string, args: KvmProxyArgs, memberOpts: pulumi.CustomResourceOptions) =>
        new PluginKvmProxy(member, args, memberOpts),
    );
    const outputs = {
      proxies: fleet.proxies,
      ids: fleet.ids,
      urls: fleet.urls,
      urlsWithCredentials: fleet.urlsWithCredentials,
      socksUrls: fleet.socksUrls,
      socksUrlsWithCredentials: fleet.socksUrlsWithCredentials,
      hosts: fleet.hosts,
      egressAddresses: fleet.egressAddresses,
    };
    const reply = new pb.ConstructResponse();
    reply.setUrn(await urnOf(fleet));
    const [state, dependencies] = (await s.rpc.serializeResourceProperties(
      `construct(${type}, ${name})`,
      outputs,
    )) as [Record<string, unknown>, Map<string, Set<pulumi.Resource>>];
    const map = reply.getStatedependenciesMap();
    for (const [key, resources] of dependencies) {
      const deps = new pb.ConstructResponse.PropertyDependencies();
      deps.setUrnsList(await Promise.all([...resources].map(urnOf)));
      map.set(key, deps);
    }
    reply.setState(structs.Struct.fromJavaScript(state));
    await s.settings.waitForRPCs();
    return reply;
  });
}
