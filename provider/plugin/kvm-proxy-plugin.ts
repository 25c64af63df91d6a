/**
 * KvmProxy as the provider plugin serves it (`kvmproxy:index:KvmProxy`):
 * the engine's requests, as plain values, onto the same KvmProxyRuntime the
 * dynamic provider uses. What differs from the dynamic front door, and
 * lives here:
 *
 * - Secrets arrive wrapped (property-values.ts): taken off, and what was
 *   secret going in (plus secret-inputs.ts's rule) is wrapped coming out.
 * - The password arrives itself, not hashed by a class in the program:
 *   check hashes it (proxy-auth.ts `hashedProxyBlock`) and keeps it beside
 *   the hash in the checked inputs, which are secret (the state holds them
 *   encrypted); create, read and update build the URLs with credentials
 *   from it and hand the runtime the inputs without it.
 * - The owner comes from the URN. A resource that has one keeps it (the
 *   VM's owner as its metadata records it, also after a move from the
 *   dynamic type by an alias), and the password's salt is that owner's URN,
 *   so neither an alias nor an import changes the hash.
 * - The engine's `customTimeouts` arrive as a request's timeout (seconds)
 *   and replace `timeouts.create` or `timeouts.delete` for that call, held
 *   to the same 24 h maximum (above it capped, with a warning).
 * - What is computed from a secret (SECRET_DERIVED_OUTPUTS: the password's
 *   hash, the seed digests, a host's key material, an import's spec hash)
 *   is never an output: a program receives every output, and the Node.js
 *   SDK prints them all with `--debug`. The engine hands diff, update, read
 *   and delete the old inputs (secret, never sent to a program), and those
 *   outputs are derived from them again (`runtimeOlds`); an import's spec
 *   hash is kept in the inputs themselves.
 */

import { hashedProxyBlock, isPlain, urlWithCredentials } from "../program/proxy-auth";
import { secretKeysOf } from "../program/secret-inputs";
import { ownerUrnOf, UNKNOWN } from "../resource/args";
import { engineTimeout } from "../resource/check";
import { recordedChecked } from "../resource/checked-inputs";
import { SECRET_DERIVED_OUTPUTS } from "../resource/kvm-proxy-properties";
import { secretDerivedOutputsOf, specHashOf } from "../resource/mapping";
import { type KvmProxyRuntime, PartialCreateError } from "../resource/provider";
import { inPluginNamespace } from "../schema/config-namespace";
import { conceal, ownerOfUrn, type Props, reveal } from "./property-values";

/** The checked inputs without the password, and the password (undefined without auth). */
export function withoutPassword(inputs: Props): { inputs: Props; password: unknown } {
  const proxy = inputs.proxy;
  if (!isPlain(proxy) || !isPlain(proxy.auth) || !("password" in proxy.auth)) {
    return { inputs, password: undefined };
  }
  const { password, ...auth } = proxy.auth;
  return { inputs: { ...inputs, proxy: { ...proxy, auth } }, password };
}

/** `proxy` (as the program gave it) with the password hashed under `saltUrn`, and the password. */
export function hashedForCheck(proxy: unknown, saltUrn: string): { proxy: unknown; password: unknown } {
  if (!isPlain(proxy) || !isPlain(proxy.auth) || !("password" in proxy.auth)) {
    return { proxy, password: undefined };
  }
  const password = proxy.auth.password;
  if (password === UNKNOWN) {
    const { password: _, ...auth } = proxy.auth;
    return { proxy: { ...proxy, auth: { ...auth, passwordHash: UNKNOWN } }, password };
  }
  return { proxy: hashedProxyBlock(proxy, saltUrn), password };
}

/** `outs` with the URLs with credentials of `auth`'s username and `password` (absent without them). */
export function withCredentialUrls(outs: Props, password: unknown): Props {
  const out = { ...outs };
  delete out.proxyUrlWithCredentials;
  delete out.socksUrlWithCredentials;
  const auth = isPlain(outs.proxy) && isPlain(outs.proxy.auth) ? outs.proxy.auth : undefined;
  if (auth === undefined || typeof password !== "string") return out;
  const credentials = { username: auth.username, password };
  const http = urlWithCredentials(outs.proxyUrl as string | undefined, credentials);
  const socks = urlWithCredentials(outs.socksUrl as string | undefined, credentials);
  if (http !== undefined) out.proxyUrlWithCredentials = http;
  if (socks !== undefined) out.socksUrlWithCredentials = socks;
  return out;
}

/** `outs` as a program receives them: nothing computed from a secret. */
export function published(outs: Props): Props {
  const out = { ...outs };
  for (const k of SECRET_DERIVED_OUTPUTS) delete out[k];
  return out;
}

/**
 * The old outputs as the runtime reads them: the state's, with what is
 * computed from a secret derived from the old inputs (plain, without the
 * password) the resource was built from. Inputs rebuilt from an imported
 * VM's metadata hold no seed: their digests are not the VM's, unless the
 * inputs build the very spec it was made from.
 */
export function runtimeOlds(outputs: Props, oldInputs: Props): Props {
  if (oldInputs.resolvedImage === undefined || typeof outputs.host !== "string") return outputs;
  const checked = recordedChecked(oldInputs);
  const derived: Props = secretDerivedOutputsOf(checked, outputs.host);
  const adopted = oldInputs.adoptedSpecHash;
  if (typeof adopted === "string") {
    derived.adoptedSpecHash = adopted;
    if (specHashOf(checked) !== adopted) {
      delete derived.userDataSha256;
      delete derived.vendorDataSha256;
    }
  }
  return { ...outputs, ...derived };
}

/** The owner a checked resource has (kept from its old inputs), else the one its URN names. */
function ownerFor(olds: Props, urn: string): Props | undefined {
  const kept = olds.owner;
  if (isPlain(kept) && typeof kept.urn === "string" && typeof kept.project === "string") return kept;
  return ownerOfUrn(urn);
}

/** The keys to wrap as secrets: what came in secret, and what is secret by rule. */
function secretsFor(props: Props, cameIn: Iterable<string>, extra: string[] = []): string[] {
  return [...new Set([...cameIn, ...secretKeysOf(props), ...extra])];
}

/**
 * A request's timeout (seconds, 0 when the program set none; the engine's
 * `name`) in place of `timeouts[kind]`, held to the provider's maximum
 * (check.ts engineTimeout): above it capped, with a warning on the resource.
 */
function withTimeout(
  runtime: KvmProxyRuntime,
  inputs: Props,
  kind: "create" | "delete",
  timeout: number | undefined,
  name = `customTimeouts.${kind}`,
): Props {
  const { seconds, warning } = engineTimeout(timeout, name);
  if (seconds === undefined) return inputs;
  if (warning !== undefined) runtime.warn(ownerUrnOf(inputs), warning);
  const timeouts = isPlain(inputs.timeouts) ? inputs.timeouts : {};
  return { ...inputs, timeouts: { ...timeouts, [kind]: seconds } };
}

/** The deadline's name when the engine's timeout (`name`) replaces `timeouts.create`. */
function deadlineOf(timeout: number | undefined, name = "customTimeouts.create"): { deadlineName?: string } {
  return timeout !== undefined && timeout > 0 ? { deadlineName: name } : {};
}

export interface CheckResult {
  inputs: Props;
  failures: { property: string; reason: string }[];
}

/** The plugin's KvmProxy over one runtime. */
export class KvmProxyPlugin {
  constructor(readonly runtime: KvmProxyRuntime) {
    // The engine sends the old inputs: the outputs keep no host connection, sealed or not (`published`).
    runtime.hostsInFull.seal = false;
    // Its notes name the keys a plugin user sets (`kvmproxy:retire`).
    runtime.wording = inPluginNamespace;
  }

  async check(urn: string, oldsIn: Props, newsIn: Props): Promise<CheckResult> {
    const olds = withoutPassword(reveal(oldsIn).props).inputs;
    const news = reveal(newsIn);
    const owner = ownerFor(olds, urn);
    const salt = typeof owner?.urn === "string" ? owner.urn : urn;
    const { proxy, password } = hashedForCheck(news.props.proxy, salt);
    const given: Props = { ...news.props };
    if (proxy !== undefined) given.proxy = proxy;
    if (owner !== undefined) given.owner = owner;
    const r = await this.runtime.check(olds, given);
    if (r.failures.length > 0) return { inputs: newsIn, failures: r.failures };
    const inputs = { ...r.inputs };
    // An import's inputs (read from the VM) carry the spec hash it was built from.
    if (typeof news.props.adoptedSpecHash === "string") inputs.adoptedSpecHash = news.props.adoptedSpecHash;
    if (password !== undefined && isPlain(inputs.proxy) && isPlain(inputs.proxy.auth)) {
      inputs.proxy = { ...inputs.proxy, auth: { ...inputs.proxy.auth, password } };
    }
    return { inputs: conceal(inputs, secretsFor(inputs, news.secretKeys)), failures: [] };
  }

  async diff(id: string, oldsIn: Props, newsIn: Props, oldInputsIn: Props) {
    const news = withoutPassword(reveal(newsIn).props).inputs;
    return this.runtime.diff(id, olds(oldsIn, oldInputsIn), news);
  }

  async create(propsIn: Props, timeout?: number): Promise<{ id: string; outs: Props }> {
    const given = reveal(propsIn);
    const { inputs, password } = withoutPassword(given.props);
    const outsOf = (outs: Props): Props => {
      const full = withCredentialUrls(published(outs), password);
      return conceal(full, secretsFor(full, given.secretKeys, CREDENTIAL_URLS));
    };
    try {
      const { id, outs } = await this.runtime.create(
        withTimeout(this.runtime, inputs, "create", timeout),
        deadlineOf(timeout),
      );
      return { id, outs: outsOf(outs) };
    } catch (err) {
      // A VM recorded after all (kept, or left by a failed rollback): its outputs as a create's.
      if (!(err instanceof PartialCreateError)) throw err;
      throw new PartialCreateError(err.message, err.id, outsOf(err.properties), err.reasons);
    }
  }

  async read(
    id: string,
    propsIn: Props,
    inputsIn: Props,
  ): Promise<{ id?: string; props?: Props; inputs?: Props }> {
    const props = reveal(propsIn);
    const inputs = reveal(inputsIn);
    const { inputs: plainInputs, password } = withoutPassword(inputs.props);
    const r = await this.runtime.read(id, runtimeOlds(props.props, plainInputs));
    if (r.props === undefined) return r;
    const full = withCredentialUrls(published(r.props), password);
    const out: { id?: string; props?: Props; inputs?: Props } = {
      ...r,
      props: conceal(full, secretsFor(full, props.secretKeys, CREDENTIAL_URLS)),
    };
    // An import: the spec hash the VM was built from goes with its inputs, not its outputs.
    const imported =
      r.inputs !== undefined && typeof r.props.adoptedSpecHash === "string"
        ? { ...r.inputs, adoptedSpecHash: r.props.adoptedSpecHash }
        : r.inputs;
    const newInputs = imported ?? (Object.keys(inputs.props).length > 0 ? inputs.props : undefined);
    if (newInputs !== undefined) out.inputs = conceal(newInputs, secretsFor(newInputs, inputs.secretKeys));
    return out;
  }

  async update(
    id: string,
    oldsIn: Props,
    newsIn: Props,
    oldInputsIn: Props,
    timeout?: number,
  ): Promise<{ outs: Props }> {
    const given = reveal(newsIn);
    const { inputs, password } = withoutPassword(given.props);
    const { outs } = await this.runtime.update(
      id,
      olds(oldsIn, oldInputsIn),
      withTimeout(this.runtime, inputs, "create", timeout, "customTimeouts.update"),
      deadlineOf(timeout, "customTimeouts.update"),
    );
    const full = withCredentialUrls(published(outs), password);
    return { outs: conceal(full, secretsFor(full, given.secretKeys, CREDENTIAL_URLS)) };
  }

  async delete(id: string, propsIn: Props, oldInputsIn: Props, timeout?: number): Promise<void> {
    await this.runtime.delete(id, withTimeout(this.runtime, olds(propsIn, oldInputsIn), "delete", timeout));
  }
}

/**
 * The runtime's view of a resource's old outputs (`runtimeOlds`) from the
 * engine's wrapped values (or a checkpoint's, revealed): what the runtime
 * reads the VM with, its host given in full among them.
 */
export function olds(outputsIn: Props, oldInputsIn: Props): Props {
  return runtimeOlds(reveal(outputsIn).props, withoutPassword(reveal(oldInputsIn).props).inputs);
}

const CREDENTIAL_URLS = ["proxyUrlWithCredentials", "socksUrlWithCredentials"];
