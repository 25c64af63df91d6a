/**
 * The provider's own configuration between two runs: which keys changed, so
 * the engine configures the default provider with the new values (it keeps
 * the recorded ones for a provider whose config it is told did not change).
 */
import { describe, expect, it } from "vitest";
import { SECRET_SIG, SECRET_VALUE } from "../../../provider/plugin/property-values";
import { configChanges } from "../../../provider/plugin/server";
import { UNKNOWN } from "../../../provider/resource/args";

const wrapped = (value: unknown) => ({ [SECRET_SIG]: SECRET_VALUE, value });
const HOSTS = JSON.stringify({ hv1: { uri: "qemu+ssh://root@hv1/system" } });

describe("the provider's config changes", () => {
  it.each<[string, Record<string, unknown>, Record<string, unknown>, string[]]>([
    ["nothing changed", { hosts: HOSTS, version: "0.9.0" }, { hosts: HOSTS, version: "0.9.0" }, []],
    ["only the plugin's version", { hosts: HOSTS, version: "0.9.0" }, { hosts: HOSTS, version: "0.9.1" }, []],
    [
      "an entry added (kvmproxy:retire)",
      { hosts: HOSTS },
      { hosts: HOSTS, retire: JSON.stringify({ edge: { reason: "r", before: "2026-12-07T10:00:00Z" } }) },
      ["retire"],
    ],
    ["an entry removed", { hosts: HOSTS, blockedAddresses: "{}" }, { hosts: HOSTS }, ["blockedAddresses"]],
    [
      "a secret that changed, compared by value",
      { sshPrivateKey: wrapped("a") },
      { sshPrivateKey: wrapped("b") },
      ["sshPrivateKey"],
    ],
    ["a secret made plain with the same value", { sshPrivateKey: wrapped("a") }, { sshPrivateKey: "a" }, []],
    ["an explicit provider's argument not known yet (a preview)", { hosts: HOSTS }, { hosts: UNKNOWN }, []],
  ])("%s", (_what, olds, news, changed) => {
    expect(configChanges(olds, news)).toEqual(changed);
  });
});
