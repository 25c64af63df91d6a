import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { inspect } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import { CredentialLoader, type CredentialOptions } from "../../../provider/transport/credentials";
import { SshTransport } from "../../../provider/transport/ssh";

const PASSPHRASE = "correct horse battery staple";
let dir: string;
let knownHostsPath: string;
const keyFiles: Record<string, string> = {};

function keyBody(file: string): string[] {
  // The base64 lines of a private key: none of them may ever show up in an error.
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.length > 0 && !l.startsWith("-----"));
}

async function loadError(opts: CredentialOptions): Promise<ProviderError> {
  const err = await new CredentialLoader(opts).load().then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof ProviderError)) throw new Error(`expected a ProviderError, got ${inspect(err)}`);
  return err;
}

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-creds-"));
  knownHostsPath = path.join(dir, "known_hosts");
  writeFileSync(knownHostsPath, "");
  const gen = (name: string, args: string[], pass = "") => {
    const file = path.join(dir, name);
    execFileSync("ssh-keygen", ["-q", ...args, "-N", pass, "-C", "t", "-f", file]);
    keyFiles[name] = file;
  };
  gen("ed25519", ["-t", "ed25519"]);
  gen("ecdsa", ["-t", "ecdsa", "-b", "384"]);
  gen("rsa", ["-t", "rsa", "-b", "2048"]);
  gen("rsa-pem", ["-t", "rsa", "-b", "2048", "-m", "PEM"]);
  gen("ed25519-pass", ["-t", "ed25519"], PASSPHRASE);
  gen("rsa-pem-pass", ["-t", "rsa", "-b", "2048", "-m", "PEM"], PASSPHRASE);
  const corrupt = path.join(dir, "corrupt");
  const lines = readFileSync(keyFiles.ed25519 as string, "utf8").split("\n");
  // Keep the armour, damage the body: looks like a key, does not parse.
  writeFileSync(corrupt, lines.map((l, i) => (i === 2 ? l.split("").reverse().join("") : l)).join("\n"));
  keyFiles.corrupt = corrupt;
  const garbage = path.join(dir, "garbage");
  writeFileSync(garbage, "this is not a key at all\n");
  keyFiles.garbage = garbage;
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function file(name: string): string {
  const f = keyFiles[name];
  if (!f) throw new Error(`no key ${name}`);
  return f;
}

describe("CredentialLoader", () => {
  it.each([
    ["ed25519", undefined],
    ["ecdsa", undefined],
    ["rsa", undefined],
    ["rsa-pem", undefined],
    ["ed25519-pass", PASSPHRASE],
    ["rsa-pem-pass", PASSPHRASE],
  ])("loads a %s key file", async (name, passphrase) => {
    const creds = await new CredentialLoader({
      privateKeyPath: file(name),
      passphrase,
      knownHostsPath,
    }).load();
    expect(creds.key?.isPrivateKey()).toBe(true);
    expect(creds.keySource).toContain(file(name));
  });

  it("loads an inline key", async () => {
    const creds = await new CredentialLoader({
      privateKey: readFileSync(file("ecdsa"), "utf8"),
      knownHosts: "",
    }).load();
    expect(creds.key?.type).toBe("ecdsa-sha2-nistp384");
    expect(creds.knownHosts.source).toBe("the inline known_hosts");
  });

  it("reads nothing in the constructor", () => {
    expect(
      () =>
        new CredentialLoader({
          privateKeyPath: path.join(dir, "absent"),
          knownHostsPath: path.join(dir, "absent"),
        }),
    ).not.toThrow();
  });

  it.each<[string, "transient" | "permanent", () => CredentialOptions, RegExp]>([
    [
      "missing key file",
      "transient",
      () => ({ privateKeyPath: path.join(dir, "absent-key"), knownHostsPath }),
      /private key file .*absent-key does not exist/,
    ],
    [
      "missing known_hosts file",
      "transient",
      () => ({ privateKeyPath: file("ed25519"), knownHostsPath: path.join(dir, "absent-kh") }),
      /known_hosts file .*absent-kh does not exist/,
    ],
    [
      "missing agent socket",
      "transient",
      () => ({ agentSocket: path.join(dir, "absent-agent"), knownHostsPath }),
      /ssh-agent socket .*absent-agent does not exist/,
    ],
    [
      "agent path that is not a socket",
      "permanent",
      () => ({ agentSocket: knownHostsPath, knownHostsPath }),
      /is not a socket/,
    ],
    [
      "corrupt key",
      "permanent",
      () => ({ privateKeyPath: file("corrupt"), knownHostsPath }),
      /corrupt is not a usable SSH private key/,
    ],
    [
      "not a key at all",
      "permanent",
      () => ({ privateKeyPath: file("garbage"), knownHostsPath }),
      /garbage is not a usable SSH private key/,
    ],
    [
      "public key instead of private",
      "permanent",
      () => ({ privateKeyPath: `${file("ed25519")}.pub`, knownHostsPath }),
      /is a public key; give the private key/,
    ],
    [
      "encrypted key without passphrase",
      "permanent",
      () => ({ privateKeyPath: file("ed25519-pass"), knownHostsPath }),
      /ed25519-pass is encrypted but no passphrase was given/,
    ],
    [
      "wrong passphrase (OpenSSH format)",
      "permanent",
      () => ({ privateKeyPath: file("ed25519-pass"), passphrase: "wrong-passphrase-1", knownHostsPath }),
      /wrong passphrase for private key file .*ed25519-pass/,
    ],
    [
      "wrong passphrase (PEM)",
      "permanent",
      () => ({ privateKeyPath: file("rsa-pem-pass"), passphrase: "wrong-passphrase-1", knownHostsPath }),
      /wrong passphrase for private key file .*rsa-pem-pass/,
    ],
    [
      "a key directory instead of a file",
      "permanent",
      () => ({ privateKeyPath: dir, knownHostsPath }),
      /cannot be read \(EISDIR\)/,
    ],
  ])("%s → %s", async (_, kind, opts, message) => {
    const err = await loadError(opts());
    expect(err.kind).toBe(kind);
    expect(err.message).toMatch(message);
  });

  it("never puts key material or passphrases in errors", async () => {
    const attempts: CredentialOptions[] = [
      { privateKeyPath: file("ed25519-pass"), passphrase: "wrong-passphrase-1", knownHostsPath },
      {
        privateKey: readFileSync(file("ed25519-pass"), "utf8"),
        passphrase: "wrong-passphrase-1",
        knownHosts: "",
      },
      { privateKey: readFileSync(file("corrupt"), "utf8"), knownHosts: "" },
      { privateKeyPath: file("rsa-pem-pass"), passphrase: "wrong-passphrase-1", knownHostsPath },
      { privateKeyPath: file("corrupt"), knownHostsPath },
    ];
    const secrets = [
      "wrong-passphrase-1",
      ...keyBody(file("ed25519-pass")),
      ...keyBody(file("corrupt")),
      ...keyBody(file("rsa-pem-pass")),
    ];
    for (const opts of attempts) {
      const err = await loadError(opts);
      const text = `${err.message}\n${err.stack}\n${inspect(err)}\n${JSON.stringify(err)}`;
      for (const s of secrets) expect(text).not.toContain(s);
    }
  });

  it("keeps secrets out of inspect() of the loader and the transport", () => {
    const privateKey = readFileSync(file("ed25519-pass"), "utf8");
    const opts = { privateKey, passphrase: PASSPHRASE, knownHosts: "" };
    const text = `${inspect(new CredentialLoader(opts), { depth: 5 })}\n${inspect(new SshTransport({ host: "h", ...opts }), { depth: 5 })}\n${JSON.stringify(new SshTransport({ host: "h", ...opts }))}`;
    for (const s of [PASSPHRASE, ...keyBody(file("ed25519-pass"))]) expect(text).not.toContain(s);
  });

  it("re-reads files until remember(), then keeps what worked until forget()", async () => {
    const keyPath = path.join(dir, "rotating");
    const loader = new CredentialLoader({ privateKeyPath: keyPath, knownHostsPath });
    expect((await loadError({ privateKeyPath: keyPath, knownHostsPath })).kind).toBe("transient");
    await expect(loader.load()).rejects.toMatchObject({ kind: "transient" });
    copyFileSync(file("ed25519"), keyPath);
    const first = await loader.load();
    expect(first.key?.type).toBe("ssh-ed25519");
    loader.remember(first);
    unlinkSync(keyPath);
    expect(await loader.load()).toBe(first);
    loader.forget();
    await expect(loader.load()).rejects.toMatchObject({ kind: "transient" });
  });

  it("accepts an ssh-agent socket that exists", async () => {
    const sock = path.join(dir, "agent.sock");
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    try {
      const creds = await new CredentialLoader({ agentSocket: sock, knownHostsPath }).load();
      expect(creds.agentSocket).toBe(sock);
      expect(creds.key).toBeUndefined();
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it.each<[string, CredentialOptions, RegExp]>([
    ["no credentials", { knownHosts: "" }, /privateKey, privateKeyPath or agentSocket/],
    [
      "key twice",
      { privateKey: "x", privateKeyPath: "/x", knownHosts: "" },
      /either privateKey or privateKeyPath/,
    ],
    [
      "known_hosts twice",
      { privateKeyPath: "/x", knownHosts: "", knownHostsPath: "/y" },
      /either knownHosts or/,
    ],
  ])("rejects %s permanently at first load, not in the constructor", async (_, opts, message) => {
    const loader = new CredentialLoader(opts);
    await expect(loader.load()).rejects.toBeInstanceOf(ProviderError);
    await expect(loader.load()).rejects.toMatchObject({
      kind: "permanent",
      message: expect.stringMatching(message),
    });
  });
});

describe("SshTransport options", () => {
  it.each([
    [{ host: "169.254.213.2", port: 2222 }, "ssh://root@169.254.213.2:2222"],
    [{ host: "kvm1.example.com", user: "virt" }, "ssh://virt@kvm1.example.com:22"],
    [{ host: "fe80::1", port: 830 }, "ssh://root@[fe80::1]:830"],
  ])("description of %o is %s", (target, description) => {
    const t = new SshTransport({
      ...target,
      privateKey: "never parsed here",
      passphrase: "p4ss",
      knownHosts: "",
    });
    expect(t.description).toBe(description);
  });

  it.each([0, 70000, 1.5])("port %s is refused", (port) => {
    expect(() => new SshTransport({ host: "h", port, privateKeyPath: "/k", knownHosts: "" })).toThrow(
      /invalid SSH port/,
    );
  });
});
