/**
 * Provider IDs: `kvm://<host>/<domain-name>`, where host is a key of the
 * provider's `hosts` configuration and domain-name the libvirt domain's name.
 * Both parts are restricted to URL-safe characters, so the ID needs no
 * escaping and parses without a URL library.
 */
import { ProviderError } from "../../errors";
import { configKeyProblem } from "../config/host-config";
import { domainNameProblem } from "./names";

/** Scheme prefix of every provider ID. */
export const PROVIDER_ID_SCHEME = "kvm://";

/** A provider ID's parts. */
export interface ProviderId {
  /** Key of the host in the provider configuration. */
  host: string;
  /** The libvirt domain name. */
  name: string;
}

/** A provider ID that does not have the form `kvm://<host>/<name>`. Always permanent. */
export class InvalidProviderIdError extends ProviderError {
  readonly id: string;

  constructor(id: string, reason: string) {
    super(
      "permanent",
      `invalid provider ID ${JSON.stringify(id)}: ${reason}; expected kvm://<host>/<domain-name>`,
    );
    this.id = id;
  }
}

/**
 * Formats the provider ID of domain `name` on host `host`:
 * `formatProviderId("edge", "web-1")` → `kvm://edge/web-1`. Throws
 * InvalidProviderIdError when either part is invalid, so an ID that could
 * not be parsed back is never produced.
 */
export function formatProviderId(host: string, name: string): string {
  const id = `${PROVIDER_ID_SCHEME}${host}/${name}`;
  const problem = partProblem(host, name);
  if (problem !== undefined) throw new InvalidProviderIdError(id, problem);
  return id;
}

/**
 * Parses `kvm://<host>/<domain-name>`. Rejects with InvalidProviderIdError
 * (permanent) anything else: another scheme, a missing host or name, extra
 * path segments, a trailing slash, a query or fragment, or characters outside
 * the host-key and domain-name rules.
 */
export function parseProviderId(id: unknown): ProviderId {
  if (typeof id !== "string") throw new InvalidProviderIdError(String(id), "not a string");
  if (id === "") throw new InvalidProviderIdError(id, "empty");
  if (!id.startsWith(PROVIDER_ID_SCHEME)) throw new InvalidProviderIdError(id, "wrong scheme");
  const rest = id.slice(PROVIDER_ID_SCHEME.length);
  const parts = rest.split("/");
  if (parts.length < 2) throw new InvalidProviderIdError(id, "missing domain name");
  if (parts.length > 2) throw new InvalidProviderIdError(id, "extra path segments");
  const [host, name] = parts as [string, string];
  if (host === "") throw new InvalidProviderIdError(id, "missing host");
  if (name === "") throw new InvalidProviderIdError(id, "missing domain name");
  const problem = partProblem(host, name);
  if (problem !== undefined) throw new InvalidProviderIdError(id, problem);
  return { host, name };
}

function partProblem(host: string, name: string): string | undefined {
  const hostProblem = configKeyProblem(host);
  if (hostProblem !== undefined) return `host ${hostProblem}`;
  const nameProblem = domainNameProblem(name);
  if (nameProblem !== undefined) return `domain name ${nameProblem}`;
  return undefined;
}
