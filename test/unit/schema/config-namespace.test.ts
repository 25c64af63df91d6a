/**
 * The plugin's words for the configuration's keys (provider/schema/config-namespace.ts):
 * text written once for both doors names `kvm:<key>`; what the plugin shows names
 * `kvmproxy:<key>`, and nothing else changes.
 */
import { describe, expect, it } from "vitest";
import { CONFIG_KEYS } from "../../../provider/resource/stack-config";
import { inPluginNamespace } from "../../../provider/schema/config-namespace";

describe("inPluginNamespace", () => {
  it.each([
    ["a key of kvm:images", "a key of kvmproxy:images"],
    ["kvm:hosts.lab.uri is not a URI", "kvmproxy:hosts.lab.uri is not a URI"],
    ["`kvm:sshPrivateKey` or `kvm:stateKey`", "`kvmproxy:sshPrivateKey` or `kvmproxy:stateKey`"],
    // Provider IDs, other words and the plugin's own words stay as they are.
    ["the ID kvm://lab/edge-1", "the ID kvm://lab/edge-1"],
    ["kvm:hostsX and kvm:imagery", "kvm:hostsX and kvm:imagery"],
    ["kvmproxy:images", "kvmproxy:images"],
  ])("%j → %j", (text, plugin) => {
    expect(inPluginNamespace(text)).toBe(plugin);
  });

  it("names every key the dynamic class reads in the plugin's namespace", () => {
    for (const key of Object.values(CONFIG_KEYS))
      expect(inPluginNamespace(key)).toBe(key.replace(/^kvm:/, "kvmproxy:"));
  });
});
