/**
 * Looking into a guest from outside: what it says about itself (the tail of
 * cloud-init's output through its agent, else what its serial console
 * printed), and how an operator reaches a VM kept after a failed create.
 * One code path for a create's error and the `console` command, so both
 * show the same lines, masked the same way.
 */

import { DEFAULT_REMOTE_SOCKET, type HostConfig } from "../config/host-config";
import { guestLinesText } from "../guest/cloud-init-result";
import { consoleLines, consoleLinesText } from "../guest/console-text";

/** What {@link guestOutputText} needs of the operations (KvmOperations is one). */
export interface GuestOutputSource {
  guestOutputTail(hostKey: string, name: string, secrets?: readonly string[]): Promise<string[] | undefined>;
}

/**
 * The guest's own lines, each secret of `secrets` masked: the last lines of
 * its cloud-init output when its agent answers, else the last lines of
 * `consoleText` (what its serial console printed); empty when neither has any.
 */
export async function guestOutputText(
  ops: GuestOutputSource,
  hostKey: string,
  name: string,
  secrets: readonly string[],
  consoleText: string | undefined,
): Promise<string[]> {
  const tail = await ops.guestOutputTail(hostKey, name, secrets);
  if (tail !== undefined && tail.length > 0) return guestLinesText(tail);
  return consoleOutputText(consoleText ?? "", secrets);
}

/** The last lines of what a serial console printed, readable and masked; empty when it printed none. */
export function consoleOutputText(consoleText: string, secrets: readonly string[]): string[] {
  return consoleLinesText(consoleLines(consoleText, secrets));
}

/**
 * The libvirt URI virsh reaches `host`'s daemon by: the driver's scheme with
 * the transport (`qemu+ssh://root@kvm1/system`), the port and socket only
 * when not the defaults. SSH options of the provider's own (keys, jump hosts,
 * known_hosts lines) are not in it: virsh uses the operator's ssh setup.
 */
export function virshUri(host: Pick<HostConfig, "endpoint" | "driverUri">): string {
  const m = /^([a-z]+):\/\/\/(.*)$/.exec(host.driverUri);
  const scheme = m?.[1] ?? "qemu";
  const path = `/${m?.[2] ?? "system"}`;
  const e = host.endpoint;
  if (e.kind === "unix") return `${scheme}+unix://${path}?socket=${e.socketPath}`;
  const address = e.host.includes(":") && !e.host.startsWith("[") ? `[${e.host}]` : e.host;
  const port = e.port === 22 ? "" : `:${e.port}`;
  const socket = e.socketPath === DEFAULT_REMOTE_SOCKET ? "" : `?socket=${e.socketPath}`;
  return `${scheme}+ssh://${e.user}@${address}${port}${path}${socket}`;
}

/** The commands that show a kept VM: its log, printed once, and its console, interactively. */
export function inspectCommands(
  hostKey: string,
  name: string,
  host: Pick<HostConfig, "endpoint" | "driverUri"> | undefined,
): { log: string; console: string } {
  return {
    log: `pulumi-kvm-proxy console ${hostKey} ${name}`,
    console:
      host === undefined
        ? `virsh console ${name} (on host ${hostKey})`
        : `virsh -c ${virshUri(host)} console ${name}`,
  };
}
