/**
 * A fleet's per-member passwords (ProxyFleet `memberPasswords`): derived in
 * the program from one secret, deterministic, distinct per member, and what
 * the fleet's proxy block must say for them (provider/program/proxy-auth.ts).
 * That each works only on its own member's squid is shown with a real squid
 * (test/libvirtd/proxy/squid-rules.test.ts); that the state holds only their
 * hashes, through the CLI (test/pulumi/fleet.test.ts).
 */
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { passwordProblem, squidPasswordHash } from "../../../provider/kvm/proxy/password-hash";
import {
  hashedProxyBlock,
  MIN_MEMBER_SECRET_LENGTH,
  memberPassword,
  memberProxyBlock,
} from "../../../provider/program/proxy-auth";

const SECRET = "the fleet's one secret, 32 chars";

describe("a member's password", () => {
  it("is HMAC-SHA-256 of the member's name under the secret, 32 base64url characters", () => {
    const want = createHmac("sha256", SECRET)
      .update("pulumi-kvm-proxy member password v1\0edge-0")
      .digest("base64url")
      .slice(0, 32);
    expect(memberPassword(SECRET, "edge-0")).toBe(want);
    expect(memberPassword(SECRET, "edge-0")).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(passwordProblem(memberPassword(SECRET, "edge-0"))).toBeUndefined();
  });

  it("is the same at every run, and differs per member, per fleet and per secret", () => {
    const passwords = [
      memberPassword(SECRET, "edge-0"),
      memberPassword(SECRET, "edge-1"),
      memberPassword(SECRET, "edge-10"),
      memberPassword(SECRET, "other-0"),
      memberPassword(`${SECRET}!`, "edge-0"),
    ];
    expect(new Set(passwords).size).toBe(passwords.length);
    expect(memberPassword(SECRET, "edge-1")).toBe(passwords[1]);
  });

  it("never gives two members the same hash: each is salted with its own URN too", () => {
    const urn = (m: string) =>
      `urn:pulumi:dev::p::kvmproxy:index:ProxyFleet$pulumi-nodejs:dynamic:KvmProxy::${m}`;
    const hashes = ["edge-0", "edge-1", "edge-2"].map((m) =>
      squidPasswordHash(memberPassword(SECRET, m), "crawler", urn(m)),
    );
    expect(new Set(hashes).size).toBe(3);
  });
});

describe("the fleet's proxy block with memberPasswords", () => {
  const block = { port: 3128, auth: { username: "crawler" }, allowedClients: ["198.51.100.0/24"] };

  it("gets the member's password beside the fleet's username, the rest as it is", () => {
    expect(memberProxyBlock(block, SECRET, "edge-1")).toEqual({
      block: { ...block, auth: { username: "crawler", password: memberPassword(SECRET, "edge-1") } },
    });
  });

  it("hashes per member as a password given by hand would be", () => {
    const r = memberProxyBlock(block, SECRET, "edge-1") as { block: Record<string, unknown> };
    expect(hashedProxyBlock(r.block, "urn:1")).toEqual(
      hashedProxyBlock(
        { ...block, auth: { username: "crawler", password: memberPassword(SECRET, "edge-1") } },
        "urn:1",
      ),
    );
  });

  it.each<[string, unknown, unknown, RegExp]>([
    ["a short secret", block, "x".repeat(MIN_MEMBER_SECRET_LENGTH - 1), /at least 16 characters/],
    ["a secret not a string", block, 12345678901234, /at least 16 characters/],
    ["no proxy block", undefined, SECRET, /needs proxy\.auth\.username/],
    ["no auth", { port: 3128 }, SECRET, /needs proxy\.auth\.username/],
    [
      "a password of the fleet's own too",
      { auth: { username: "u", password: "p".repeat(20) } },
      SECRET,
      /leave proxy\.auth\.password out/,
    ],
  ])("refuses %s, and quotes neither the secret nor a password", (_what, b, secret, problem) => {
    const r = memberProxyBlock(b, secret, "edge-0");
    expect("problem" in r ? r.problem : "").toMatch(problem);
    expect(JSON.stringify(r)).not.toContain(String(secret));
    expect(JSON.stringify(r)).not.toContain("p".repeat(20));
  });
});
