import { describe, expect, it } from "vitest";
import { GUEST_AGENT_CHANNEL, parseDomainXml } from "../../../../provider/kvm/domain/domain-xml";

const domain = (channels: string): string =>
  `<domain type='qemu'><name>web-1</name><memory unit='KiB'>131072</memory><vcpu>1</vcpu>` +
  `<os><type arch='x86_64'>hvm</type></os><devices>${channels}</devices></domain>`;

const channel = (name: string, state?: string): string =>
  `<channel type='unix'><source mode='bind'/><target type='virtio' name='${name}'${
    state === undefined ? "" : ` state='${state}'`
  }/></channel>`;

// get() asks the agent for addresses only when this says it may answer.
describe("the guest-agent channel state in the parsed domain", () => {
  it.each([
    ["connected", channel(GUEST_AGENT_CHANNEL, "connected"), "connected"],
    ["disconnected", channel(GUEST_AGENT_CHANNEL, "disconnected"), "disconnected"],
    [
      "another channel first",
      channel("org.example.other", "connected") + channel(GUEST_AGENT_CHANNEL, "disconnected"),
      "disconnected",
    ],
    ["no channel at all", "", "none"],
    ["only another channel", channel("org.example.other", "connected"), "none"],
  ])("%s", (_label, channels, expected) => {
    expect(parseDomainXml(domain(channels)).guestAgent).toBe(expected);
  });

  it("is unknown when libvirt gives no state (inactive XML)", () => {
    const parsed = parseDomainXml(domain(channel(GUEST_AGENT_CHANNEL)));
    expect(parsed.guestAgent).toBeUndefined();
    expect("guestAgent" in parsed).toBe(false);
  });
});
