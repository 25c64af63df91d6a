/**
 * The provider plugin's KvmProxy as a resource declared from inside the
 * plugin: what a ProxyFleet the plugin constructs (construct.ts) makes its
 * members of. Its type is the schema's `kvmproxy:index:KvmProxy`, so the
 * engine hands each member back to this provider like any other proxy.
 * Its arguments go to the engine as they are (the plugin's check hashes
 * the password); its outputs are the ones the schema publishes, the URLs
 * with credentials among them, secret.
 */
import * as pulumi from "@pulumi/pulumi";
import type { FleetMember } from "../program/proxy-fleet";
import type { KvmProxyArgs } from "../resource/args";
import { KVM_PROXY_TOKEN } from "../schema/properties";
import { servedSchemaSpec } from "./served-schema";

/** The outputs the plugin's KvmProxy publishes (the served schema's), and which are secret. */
export function publishedOutputs(): { names: string[]; secret: string[] } {
  const props = servedSchemaSpec().resources[KVM_PROXY_TOKEN]?.properties ?? {};
  return {
    names: Object.keys(props),
    secret: Object.keys(props).filter((n) => props[n]?.secret === true),
  };
}

/** A member of a fleet the plugin constructs: the plugin's own KvmProxy. */
export class PluginKvmProxy extends pulumi.CustomResource implements FleetMember {
  declare readonly host: pulumi.Output<string>;
  declare readonly proxyUrl: pulumi.Output<string | undefined>;
  declare readonly proxyUrlWithCredentials: pulumi.Output<string | undefined>;
  declare readonly socksUrl: pulumi.Output<string | undefined>;
  declare readonly socksUrlWithCredentials: pulumi.Output<string | undefined>;
  declare readonly egressAddress: pulumi.Output<string | undefined>;

  constructor(name: string, args: KvmProxyArgs, opts: pulumi.CustomResourceOptions = {}) {
    const { names, secret } = publishedOutputs();
    // Every published output is a property to resolve; the arguments are the inputs.
    const props: Record<string, unknown> = Object.fromEntries(names.map((n) => [n, undefined]));
    Object.assign(props, args);
    super(KVM_PROXY_TOKEN, name, props, {
      ...opts,
      additionalSecretOutputs: [...(opts.additionalSecretOutputs ?? []), ...secret],
    });
  }
}
