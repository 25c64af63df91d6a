/**
 * The two namespaces of the same configuration keys: the dynamic class reads
 * `kvm:hosts`, `kvm:images`, `kvm:sshPrivateKey` and `kvm:stateKey`; the
 * plugin reads them under its package's name, `kvmproxy:hosts` and so on.
 * Text written once for both doors (TSDoc, error messages) names the `kvm:`
 * keys; what the plugin shows (its schema, failures and errors) passes here.
 */
import { PACKAGE } from "./type-spec";

/** The provider plugin's configuration namespace (its package's name). */
export const PLUGIN_CONFIG_NAMESPACE = PACKAGE;

/** Text with each `kvm:<key>` of the configuration named in the plugin's namespace (`kvm:hosts` → `kvmproxy:hosts`). */
export function inPluginNamespace(text: string): string {
  return text.replace(/\bkvm:(hosts|images|sshPrivateKey|stateKey)\b/g, `${PLUGIN_CONFIG_NAMESPACE}:$1`);
}
