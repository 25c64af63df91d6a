import { describe, expect, it } from "vitest";
import { isTransient } from "../../../provider/errors";
import {
  ConnectionClosedError,
  classifyRemoteError,
  ErrorCode,
  errorCodeName,
  errorDomainName,
  LibvirtError,
  XdrReader,
  XdrWriter,
} from "../../../provider/libvirt";
import { decodeError, readRemoteError, writeRemoteError } from "../../../provider/libvirt/codec";
import { KNOWN_ERROR_CODES, KNOWN_ERROR_DOMAINS } from "../../../provider/libvirt/error-codes";

function craftedBody(): Buffer {
  // Every member present, including the deprecated dom and net, so each offset is exercised.
  const w = new XdrWriter();
  writeRemoteError(w, {
    code: 42,
    domain: 10,
    message: "Domain not found: no domain with matching name 'x'",
    level: 2,
    dom: { name: "x", uuid: "00000000-0000-0000-0000-000000000001", id: 3 },
    str1: "Domain not found: %s",
    str2: "no domain with matching name 'x'",
    str3: "third",
    int1: 7,
    int2: -9,
    net: { name: "default", uuid: "00000000-0000-0000-0000-000000000002" },
  });
  return w.finish();
}

describe("remote_error decoding", () => {
  it("decodes every field and consumes the whole body", () => {
    const r = new XdrReader(craftedBody());
    expect(readRemoteError(r)).toEqual({
      code: 42,
      domain: 10,
      message: "Domain not found: no domain with matching name 'x'",
      level: 2,
      str1: "Domain not found: %s",
      str2: "no domain with matching name 'x'",
      str3: "third",
      int1: 7,
      int2: -9,
    });
    r.end();
  });

  it("turns an error reply into a LibvirtError naming the call", () => {
    const err = decodeError(craftedBody(), "virDomainLookupByName") as LibvirtError;
    expect(err).toBeInstanceOf(LibvirtError);
    expect(err).toMatchObject({
      code: 42,
      codeName: "VIR_ERR_NO_DOMAIN",
      domain: 10,
      domainName: "VIR_FROM_QEMU",
      level: 2,
      str1: "Domain not found: %s",
      str2: "no domain with matching name 'x'",
      str3: "third",
      int1: 7,
      int2: -9,
      call: "virDomainLookupByName",
      kind: "permanent",
      libvirtMessage: "Domain not found: no domain with matching name 'x'",
    });
    expect(err.message).toBe(
      "virDomainLookupByName: Domain not found: no domain with matching name 'x' (VIR_ERR_NO_DOMAIN)",
    );
  });

  it("decodes absent optional strings as null", () => {
    const w = new XdrWriter();
    writeRemoteError(w, {
      code: 1,
      domain: 0,
      message: null,
      level: 2,
      str1: null,
      str2: null,
      str3: null,
      int1: 0,
      int2: 0,
    });
    const err = decodeError(w.finish(), "virConnectOpen") as LibvirtError;
    expect([err.str1, err.str2, err.str3]).toEqual([null, null, null]);
    expect(err.message).toBe("virConnectOpen: VIR_ERR_INTERNAL_ERROR (VIR_ERR_INTERNAL_ERROR)");
  });

  it("a truncated error body becomes a permanent protocol error, not a crash", () => {
    const err = decodeError(craftedBody().subarray(0, 20), "virDomainCreate");
    expect(err.message).toMatch(/^virDomainCreate: malformed error reply/);
    expect(isTransient(err)).toBe(false);
  });
});

describe("error code tables", () => {
  it.each([
    [0, "VIR_ERR_OK"],
    [1, "VIR_ERR_INTERNAL_ERROR"],
    [9, "VIR_ERR_OPERATION_FAILED"],
    [28, "VIR_ERR_DOM_EXIST"],
    [38, "VIR_ERR_SYSTEM_ERROR"],
    [41, "VIR_WAR_NO_NETWORK"],
    [42, "VIR_ERR_NO_DOMAIN"],
    [43, "VIR_ERR_NO_NETWORK"],
    [45, "VIR_ERR_AUTH_FAILED"],
    [49, "VIR_ERR_NO_STORAGE_POOL"],
    [50, "VIR_ERR_NO_STORAGE_VOL"],
    [55, "VIR_ERR_OPERATION_INVALID"],
    [64, "VIR_WAR_NO_SECRET"],
    [68, "VIR_ERR_OPERATION_TIMEOUT"],
    [80, "VIR_ERR_NO_DOMAIN_METADATA"],
    [86, "VIR_ERR_AGENT_UNRESPONSIVE"],
    [90, "VIR_ERR_STORAGE_VOL_EXIST"],
    [110, "VIR_ERR_MULTIPLE_DOMAINS"],
    [111, "VIR_ERR_NO_NETWORK_METADATA"],
    [500, "VIR_ERR_UNKNOWN_500"],
  ])("code %i is %s", (code, name) => {
    expect(errorCodeName(code)).toBe(name);
  });

  it.each([
    [0, "VIR_FROM_NONE"],
    [7, "VIR_FROM_RPC"],
    [10, "VIR_FROM_QEMU"],
    [12, "VIR_FROM_TEST"],
    [18, "VIR_FROM_STORAGE"],
    [72, "VIR_FROM_CH"],
    [99, "VIR_FROM_UNKNOWN_99"],
  ])("domain %i is %s", (domain, name) => {
    expect(errorDomainName(domain)).toBe(name);
  });

  it("covers every virErrorNumber up to 111 and every virErrorDomain up to 72, without holes", () => {
    expect(KNOWN_ERROR_CODES).toBe(112);
    expect(KNOWN_ERROR_DOMAINS).toBe(73);
    for (let i = 0; i < KNOWN_ERROR_CODES; i++) expect(errorCodeName(i)).toMatch(/^VIR_(ERR|WAR)_[A-Z_]+$/);
    for (let i = 0; i < KNOWN_ERROR_DOMAINS; i++) expect(errorDomainName(i)).toMatch(/^VIR_FROM_[A-Z_]+$/);
    expect(new Set(Array.from({ length: KNOWN_ERROR_CODES }, (_, i) => errorCodeName(i))).size).toBe(112);
  });
});

describe("transient or permanent", () => {
  it.each([
    ["NO_DOMAIN", ErrorCode.NO_DOMAIN, 10, "permanent"],
    ["NO_STORAGE_VOL", ErrorCode.NO_STORAGE_VOL, 18, "permanent"],
    ["XML_ERROR", ErrorCode.XML_ERROR, 20, "permanent"],
    ["OPERATION_INVALID", ErrorCode.OPERATION_INVALID, 10, "permanent"],
    ["OPERATION_FAILED", ErrorCode.OPERATION_FAILED, 10, "permanent"],
    ["INTERNAL_ERROR", ErrorCode.INTERNAL_ERROR, 10, "permanent"],
    ["RPC from the daemon", ErrorCode.RPC, 7, "permanent"],
    ["SYSTEM_ERROR from storage", ErrorCode.SYSTEM_ERROR, 18, "permanent"],
    ["SYSTEM_ERROR on the connection (RPC)", ErrorCode.SYSTEM_ERROR, 7, "transient"],
    ["SYSTEM_ERROR on the connection (REMOTE)", ErrorCode.SYSTEM_ERROR, 13, "transient"],
    ["OPERATION_TIMEOUT (state change lock)", ErrorCode.OPERATION_TIMEOUT, 10, "transient"],
    ["OPERATION_ABORTED", ErrorCode.OPERATION_ABORTED, 10, "transient"],
    ["AGENT_UNRESPONSIVE", ErrorCode.AGENT_UNRESPONSIVE, 10, "transient"],
    ["AGENT_UNSYNCED", ErrorCode.AGENT_UNSYNCED, 10, "transient"],
    ["RESOURCE_BUSY", ErrorCode.RESOURCE_BUSY, 18, "transient"],
    ["NO_CONNECT", ErrorCode.NO_CONNECT, 13, "transient"],
    ["NO_MEMORY", ErrorCode.NO_MEMORY, 0, "transient"],
  ])("%s is %s", (_name, code, domain, kind) => {
    expect(classifyRemoteError(code, domain)).toBe(kind);
  });

  it("a dropped connection is transient", () => {
    expect(isTransient(new ConnectionClosedError("gone"))).toBe(true);
  });
});
