/**
 * The two namespaces of the same configuration keys: the dynamic class reads
 * `kvm:hosts`, `kvm:images`, `kvm:sshPrivateKey` and `kvm:stateKey`; the
 * plugin reads them under its package's name, `kvmproxy:hosts` and so on.
 * Text written once for both doors (TSDoc, error messages) names the `kvm:`
 * keys; what the plugin shows (its schema, failures and errors) passes here.
 */
import { CONFIG_KEY_NAMES, PACKAGE } from "./type-spec";

/** The provider plugin's configuration namespace (its package's name). */
export const PLUGIN_CONFIG_NAMESPACE = PACKAGE;

/** `kvm:<key>` for a key of the configuration, a whole word (not `kvm://`, not `kvm:hostsX`). */
const DYNAMIC_KEY = new RegExp(`\\bkvm:(${CONFIG_KEY_NAMES.join("|")})\\b`, "g");

/** Text with each `kvm:<key>` of the configuration named in the plugin's namespace (`kvm:hosts` → `kvmproxy:hosts`). */
export function inPluginNamespace(text: string): string {
  return text.replace(DYNAMIC_KEY, `${PLUGIN_CONFIG_NAMESPACE}:$1`);
}
