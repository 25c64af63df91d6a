/**
 * The provider plugin's gRPC server: Pulumi's `ResourceProvider` service
 * over KvmProxyPlugin (kvm-proxy-plugin.ts). Implemented directly on the
 * generated stubs of the `@pulumi/pulumi` this package resolves, as
 * Pulumi's provider guide does: the SDK's `provider.main` hands a provider
 * no configuration, passes no timeouts and fails an import.
 *
 * - Configure reads `kvmproxy:hosts`, `kvmproxy:images` and
 *   `kvmproxy:sshPrivateKey` (an explicit provider's own arguments, or the
 *   stack config for the default provider) and accepts secrets.
 * - CheckConfig reports what the configuration's rules refuse as a whole;
 *   a bad host or image entry fails only the resources that use it, at
 *   their check, as with the dynamic provider. DiffConfig never replaces:
 *   changing how a host is reached rebuilds no VM.
 * - A failure is a gRPC error whose message is the provider's (no stack
 *   trace, nothing secret: the runtime's messages are redacted); a create
 *   whose VM is left in place answers with ErrorResourceInitFailed so the
 *   engine records it.
 * - Construct builds a ProxyFleet (construct.ts): its members are the
 *   plugin's own KvmProxy, registered with the engine like a program's.
 * - Cancel stops new work and ends the creates and updates in flight at
 *   their next wait (KvmProxyRuntime.cancel); they roll back what they
 *   made over the connections, which stay open for that.
 */
import { createRequire } from "node:module";
import { isDeepStrictEqual } from "node:util";
import { messageOf } from "../errors";
import { secretConfigKeysOf } from "../program/secret-inputs";
import { isUnknown } from "../resource/args";
import { engineAddressFromArgv } from "../resource/engine-log";
import { type KvmProxyRuntime, PartialCreateError } from "../resource/provider";
import { inPluginNamespace } from "../schema/config-namespace";
import { KVM_PROXY_TOKEN } from "../schema/properties";
import { construct } from "./construct";
import { KvmProxyPlugin } from "./kvm-proxy-plugin";
import { type Props, reveal, secret } from "./property-values";
import { packageVersion, servedSchema } from "./served-schema";

export { packageVersion, servedSchema };

// biome-ignore lint/suspicious/noExplicitAny: the generated stubs are untyped JavaScript here
type Message = any;
type Callback = (err: unknown, reply?: unknown) => void;

interface Modules {
  grpc: Message;
  services: Message;
  pb: Message;
  plugin: Message;
  struct: Message;
  empty: Message;
  any: Message;
  status: Message;
}

function load(): Modules {
  const pulumiRequire = createRequire(require.resolve("@pulumi/pulumi"));
  return {
    grpc: pulumiRequire("@grpc/grpc-js"),
    services: pulumiRequire("./proto/provider_grpc_pb"),
    pb: pulumiRequire("./proto/provider_pb"),
    plugin: pulumiRequire("./proto/plugin_pb"),
    struct: pulumiRequire("google-protobuf/google/protobuf/struct_pb"),
    empty: pulumiRequire("google-protobuf/google/protobuf/empty_pb"),
    any: pulumiRequire("google-protobuf/google/protobuf/any_pb"),
    status: pulumiRequire("./proto/status_pb"),
  };
}

/**
 * The runtime's configuration getter (keys `kvm:hosts`...) over a Configure
 * request: an explicit provider's arguments, else the variables
 * (`kvmproxy:config:hosts`, JSON text for objects).
 */
export function configGetter(args: Props, variables: ReadonlyMap<string, string>): (key: string) => unknown {
  return (key) => {
    const name = key.replace(/^kvm:/, "");
    if (args[name] !== undefined && args[name] !== null) return args[name];
    const full = inPluginNamespace(key);
    return variables.get(full.replace(":", ":config:")) ?? variables.get(full);
  };
}

/**
 * The configuration keys whose values differ between a provider's recorded
 * and new arguments (`version` aside). Any one makes the provider an update:
 * the engine configures an unchanged provider with its recorded arguments,
 * so a `kvmproxy:retire` written since would never reach it. A value not
 * known yet is not compared.
 */
export function configChanges(olds: Props, news: Props): string[] {
  const o = reveal(olds).props;
  const n = reveal(news).props;
  return (
    [...new Set([...Object.keys(o), ...Object.keys(n)])]
      // A value not known yet (a preview) is no change: the engine would configure the provider with it.
      .filter((k) => k !== "version" && !isUnknown(n[k]) && !isDeepStrictEqual(o[k], n[k]))
      .sort()
  );
}

function message(err: unknown): string {
  return inPluginNamespace(messageOf(err));
}

/** Starts the server on 127.0.0.1; resolves to its port. */
export async function serve(runtime: KvmProxyRuntime): Promise<{ port: number; stop(): Promise<void> }> {
  const m = load();
  const plugin = new KvmProxyPlugin(runtime);
  const toJs = (s: Message): Props => (s === undefined ? {} : (s.toJavaScript() as Props));
  // Struct takes no undefined: the JSON round trip drops it, as the engine would.
  const toStruct = (p: Props): Message => m.struct.Struct.fromJavaScript(JSON.parse(JSON.stringify(p)));
  let cancelled = false;

  const fail = (err: unknown): Message => {
    if (err instanceof PartialCreateError) {
      const detail = new m.pb.ErrorResourceInitFailed();
      detail.setId(err.id);
      detail.setProperties(toStruct(err.properties));
      detail.setReasonsList(err.reasons.map(inPluginNamespace));
      const any = new m.any.Any();
      any.pack(detail.serializeBinary(), "pulumirpc.ErrorResourceInitFailed");
      const status = new m.status.Status();
      status.setCode(m.grpc.status.UNKNOWN);
      status.setMessage(message(err));
      status.addDetails(any);
      const metadata = new m.grpc.Metadata();
      metadata.add("grpc-status-details-bin", Buffer.from(status.serializeBinary()));
      return { code: m.grpc.status.UNKNOWN, details: message(err), metadata };
    }
    return { code: m.grpc.status.UNKNOWN, details: message(err) };
  };

  /** A unary handler: `fn` answers, or its failure becomes the call's error. */
  const unary =
    (fn: (req: Message) => Promise<Message> | Message) =>
    (call: { request: Message }, callback: Callback) => {
      Promise.resolve()
        .then(() => {
          if (cancelled) throw new Error("the provider was cancelled");
          return fn(call.request);
        })
        .then(
          (reply) => callback(null, reply),
          (err) => callback(fail(err)),
        );
    };

  const unknownType = (req: Message): void => {
    const type = typeof req.getType === "function" ? req.getType() : "";
    const urn: string = req.getUrn();
    if (type !== "" && type !== KVM_PROXY_TOKEN) throw new Error(`unknown resource type ${type}`);
    if (type === "" && !urn.includes(`::${KVM_PROXY_TOKEN}::`)) throw new Error(`unknown resource ${urn}`);
  };

  const unimplemented = (what: string) => (_call: unknown, callback: Callback) =>
    callback({ code: m.grpc.status.UNIMPLEMENTED, details: `${what} is not implemented by kvmproxy` });

  const service = {
    getPluginInfo: unary(() => new m.plugin.PluginInfo().setVersion(packageVersion())),
    getSchema: unary(() => new m.pb.GetSchemaResponse().setSchema(servedSchema())),
    checkConfig: unary((req) => {
      const news = toJs(req.getNews());
      // Key material and a bake's user-data stay secret in the state, however the program gave them.
      for (const key of secretConfigKeysOf(reveal(news).props)) news[key] = secret(news[key]);
      const reply = new m.pb.CheckResponse();
      reply.setInputs(toStruct(news));
      return reply;
    }),
    diffConfig: unary((req) => {
      const changed = configChanges(toJs(req.getOlds()), toJs(req.getNews()));
      const reply = new m.pb.DiffResponse();
      reply.setChanges(
        changed.length > 0
          ? m.pb.DiffResponse.DiffChanges.DIFF_SOME
          : m.pb.DiffResponse.DiffChanges.DIFF_NONE,
      );
      // Never a replace: the provider is updated in place, its proxies untouched.
      reply.setDiffsList(changed);
      return reply;
    }),
    configure: unary(async (req) => {
      const args = reveal(toJs(req.getArgs())).props;
      const variables = new Map<string, string>(req.getVariablesMap().entries());
      await runtime.configure({ config: { get: configGetter(args, variables) } });
      const reply = new m.pb.ConfigureResponse();
      reply.setAcceptsecrets(true);
      reply.setSupportspreview(false);
      reply.setAcceptresources(false);
      return reply;
    }),
    check: unary(async (req) => {
      unknownType(req);
      const r = await plugin.check(req.getUrn(), toJs(req.getOlds()), toJs(req.getNews()));
      const reply = new m.pb.CheckResponse();
      reply.setInputs(toStruct(r.inputs));
      reply.setFailuresList(
        r.failures.map((f) => {
          const x = new m.pb.CheckFailure();
          x.setProperty(inPluginNamespace(f.property));
          x.setReason(inPluginNamespace(f.reason));
          return x;
        }),
      );
      return reply;
    }),
    diff: unary(async (req) => {
      unknownType(req);
      const d = await plugin.diff(
        req.getId(),
        toJs(req.getOlds()),
        toJs(req.getNews()),
        toJs(req.getOldInputs()),
      );
      const reply = new m.pb.DiffResponse();
      reply.setChanges(
        d.changes ? m.pb.DiffResponse.DiffChanges.DIFF_SOME : m.pb.DiffResponse.DiffChanges.DIFF_NONE,
      );
      reply.setReplacesList(d.replaces);
      reply.setDeletebeforereplace(d.deleteBeforeReplace === true);
      return reply;
    }),
    create: unary(async (req) => {
      unknownType(req);
      const r = await plugin.create(toJs(req.getProperties()), req.getTimeout());
      const reply = new m.pb.CreateResponse();
      reply.setId(r.id);
      reply.setProperties(toStruct(r.outs));
      return reply;
    }),
    read: unary(async (req) => {
      unknownType(req);
      const r = await plugin.read(req.getId(), toJs(req.getProperties()), toJs(req.getInputs()));
      const reply = new m.pb.ReadResponse();
      if (r.props === undefined) return reply;
      reply.setId(r.id ?? req.getId());
      reply.setProperties(toStruct(r.props));
      if (r.inputs !== undefined) reply.setInputs(toStruct(r.inputs));
      return reply;
    }),
    update: unary(async (req) => {
      unknownType(req);
      const r = await plugin.update(
        req.getId(),
        toJs(req.getOlds()),
        toJs(req.getNews()),
        toJs(req.getOldInputs()),
        req.getTimeout(),
      );
      const reply = new m.pb.UpdateResponse();
      reply.setProperties(toStruct(r.outs));
      return reply;
    }),
    delete: unary(async (req) => {
      unknownType(req);
      await plugin.delete(req.getId(), toJs(req.getProperties()), toJs(req.getOldInputs()), req.getTimeout());
      return new m.empty.Empty();
    }),
    cancel: (_call: unknown, callback: Callback) => {
      cancelled = true;
      runtime.cancel();
      callback(null, new m.empty.Empty());
    },
    handshake: unimplemented("Handshake"),
    parameterize: unimplemented("Parameterize"),
    invoke: unimplemented("Invoke"),
    call: unimplemented("Call"),
    list: unimplemented("List"),
    construct: (call: { request: Message }, callback: Callback) => {
      const engine = engineAddressFromArgv();
      if (engine === undefined) {
        callback({
          code: m.grpc.status.FAILED_PRECONDITION,
          details: "no engine address on the command line",
        });
        return;
      }
      construct(call.request, m.pb, m.struct, engine).then(
        (reply: Message) => callback(null, reply),
        (err: unknown) => callback(fail(err)),
      );
    },
    attach: unimplemented("Attach"),
    getMapping: unary(() => new m.pb.GetMappingResponse()),
    getMappings: unary(() => new m.pb.GetMappingsResponse()),
  };

  const server = new m.grpc.Server({ "grpc.max_receive_message_length": 400 * 1024 * 1024 });
  server.addService(m.services.ResourceProviderService, service);
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync("127.0.0.1:0", m.grpc.ServerCredentials.createInsecure(), (err: unknown, p: number) =>
      err ? reject(err) : resolve(p),
    );
  });
  return {
    port,
    stop: () => new Promise((resolve) => server.tryShutdown(() => resolve())),
  };
}
