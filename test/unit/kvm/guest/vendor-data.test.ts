import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../../provider/errors";
import {
  buildVendorData,
  GUEST_AGENT_SCRIPT,
  GUEST_AGENT_SCRIPT_FILENAME,
  guestAgentScript,
  USER_VENDOR_DATA_FILENAME,
} from "../../../../provider/kvm/guest/vendor-data";
import { PROXY_APT_PACKAGES } from "../../../../provider/kvm/proxy/setup";

const workDir = mkdtempSync(path.join(tmpdir(), "cloud-init-test-"));
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

interface ParsedPart {
  contentType: string;
  transferEncoding: string | null;
  filename: string | null;
  /** The payload as cloud-init's handlers get it, back as bytes (base64 here). */
  payload: string;
}

/**
 * Parses vendor-data the way cloud-init's user_data.convert_string and
 * util.fully_decoded_payload do, with Python's stdlib email parser: MIME when
 * "mime-version:" is in the first 4096 bytes, parsed from the UTF-8 decoded
 * string; each non-multipart part decoded per its Content-Transfer-Encoding,
 * text parts then decoded as UTF-8 with surrogateescape. The payloads are
 * turned back into bytes so the test can compare them with the input.
 */
const CLOUD_INIT_PARSE = `
import sys, json, base64, email
data = sys.stdin.buffer.read()
if b"mime-version:" not in data[0:4096].lower():
    print(json.dumps({"mime": False})); sys.exit(0)
msg = email.message_from_string(data.decode("utf-8"))
parts = []
for part in msg.walk():
    if part.get_content_maintype() == "multipart":
        continue
    payload = part.get_payload(decode=True)
    if part.get_content_maintype() == "text":
        payload = payload.decode("utf-8", "surrogateescape").encode("utf-8", "surrogateescape")
    parts.append({
        "contentType": part.get_content_type(),
        "transferEncoding": part.get("Content-Transfer-Encoding"),
        "filename": part.get_filename(),
        "payload": base64.b64encode(payload).decode("ascii"),
    })
print(json.dumps({"mime": True, "topType": msg.get_content_type(), "defects": len(msg.defects), "parts": parts}))
`;

function parseLikeCloudInit(data: Buffer): {
  mime: boolean;
  topType?: string;
  defects?: number;
  parts?: ParsedPart[];
} {
  return JSON.parse(execFileSync("python3", ["-c", CLOUD_INIT_PARSE], { input: data }).toString("utf8"));
}

const payloadOf = (part: ParsedPart | undefined): Buffer => Buffer.from(part?.payload ?? "", "base64");

function boundaryOf(mime: Buffer): string {
  const match = /boundary="([^"]+)"/.exec(mime.toString("latin1"));
  if (!match?.[1]) throw new Error("no boundary");
  return match[1];
}

function permanentError(fn: () => unknown): ProviderError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    expect((err as ProviderError).kind).toBe("permanent");
    return err as ProviderError;
  }
  throw new Error("expected a ProviderError");
}

describe("buildVendorData: what the seed's vendor-data is", () => {
  it("is absent without the guest agent and without vendorData", () => {
    expect(buildVendorData({ installGuestAgent: false })).toBeUndefined();
  });

  it("is the guest-agent script alone when there is no vendorData", () => {
    expect(buildVendorData({ installGuestAgent: true })?.toString("utf8")).toBe(GUEST_AGENT_SCRIPT);
  });

  it("is the guest-agent script alone when vendorData is empty", () => {
    expect(buildVendorData({ installGuestAgent: true, vendorData: "" })?.toString("utf8")).toBe(
      GUEST_AGENT_SCRIPT,
    );
    expect(buildVendorData({ installGuestAgent: true, vendorData: Buffer.alloc(0) })?.toString("utf8")).toBe(
      GUEST_AGENT_SCRIPT,
    );
  });

  it("is a script cloud-init runs as a script on its own (not taken for MIME, sniffed by #!)", () => {
    expect(parseLikeCloudInit(Buffer.from(GUEST_AGENT_SCRIPT))).toEqual({ mime: false });
    expect(GUEST_AGENT_SCRIPT.startsWith("#!/bin/sh\n")).toBe(true);
    expect(/^[\t\n\x20-\x7e]*$/.test(GUEST_AGENT_SCRIPT)).toBe(true);
  });

  const gzipped = gzipSync(Buffer.from("#cloud-config\npackages: [htop]\n"));
  it.each([
    ["a cloud-config string", "#cloud-config\npackages: [htop]\n"],
    ["a script", "#!/bin/bash\necho hi\n"],
    ["an empty string", ""],
    ["a MIME multipart", 'Content-Type: multipart/mixed; boundary="x"\nMIME-Version: 1.0\n\n--x\n\n--x--\n'],
    ["gzip bytes", gzipped],
    ["non-UTF-8 bytes", Buffer.from([0xff, 0xfe, 0x00, 0x41])],
    ["UTF-8 with CRLF", "#cloud-config\r\nbootcmd: ['echo é']\r\n"],
  ])("is vendorData byte for byte when the guest agent is off: %s", (_, vendorData) => {
    const out = buildVendorData({ installGuestAgent: false, vendorData });
    const expected = typeof vendorData === "string" ? Buffer.from(vendorData, "utf8") : vendorData;
    expect(out?.equals(expected)).toBe(true);
  });
});

describe("buildVendorData: the script beside the user's vendorData (MIME multipart)", () => {
  const longLine = `#cloud-config\n# ${"x".repeat(2000)}\n`;
  // Each row: the user's vendorData, the type cloud-init must see declared, and the transfer encoding.
  const cases: Array<[string, string | Buffer, string, string]> = [
    ["#cloud-config", "#cloud-config\npackages: [htop]\nruncmd: [[echo, hi]]\n", "text/plain", "7bit"],
    ["#! script", "#!/bin/bash\nset -e\necho from-vendor > /tmp/v\n", "text/plain", "7bit"],
    [
      "jinja template",
      "## template: jinja\n#cloud-config\nhostname: {{ v1.local_hostname }}\n",
      "text/plain",
      "7bit",
    ],
    ["#include", "#include\nhttps://example.invalid/extra.yaml\n", "text/plain", "7bit"],
    ["text without a final newline", "#cloud-config\nruncmd: [ls]", "text/plain", "7bit"],
    ["CRLF text", "#cloud-config\r\nruncmd: [ls]\r\n", "text/plain", "7bit"],
    ["MIME-like lines and dashes", "#!/bin/sh\n--\n--x--\n\nContent-Type: text/html\n", "text/plain", "7bit"],
    [
      "UTF-8 non-ASCII",
      "#cloud-config\nwrite_files:\n- content: 'héllo ✓ 你好 🚀'\n",
      "text/plain",
      "base64",
    ],
    ["a trailing lone CR", "#cloud-config\nruncmd: [ls]\r", "text/plain", "base64"],
    ["a NUL byte", "#!/bin/sh\necho a\u0000b\n", "text/plain", "base64"],
    ["a line over 998 bytes", longLine, "text/plain", "base64"],
    ["non-UTF-8 bytes", Buffer.from([0x23, 0x21, 0x2f, 0xff, 0xfe, 0x0a]), "text/plain", "base64"],
    ["gzip bytes", gzipSync(Buffer.from("#cloud-config\nruncmd: [ls]\n")), "application/gzip", "base64"],
  ];

  it.each(cases)(
    "%s: cloud-init's parser sees exactly the script and the user's bytes, with the right types",
    (_, vendorData, declaredType, encoding) => {
      const out = buildVendorData({ installGuestAgent: true, vendorData });
      if (!out) throw new Error("no vendor-data");
      const parsed = parseLikeCloudInit(out);
      expect(parsed.mime).toBe(true);
      expect(parsed.topType).toBe("multipart/mixed");
      expect(parsed.defects).toBe(0);
      expect(parsed.parts).toHaveLength(2);
      const [script, user] = parsed.parts ?? [];
      expect(script).toMatchObject({
        contentType: "text/x-shellscript",
        transferEncoding: "7bit",
        filename: GUEST_AGENT_SCRIPT_FILENAME,
      });
      expect(payloadOf(script).toString("utf8")).toBe(GUEST_AGENT_SCRIPT);
      expect(user).toMatchObject({
        contentType: declaredType,
        transferEncoding: encoding,
        filename: USER_VENDOR_DATA_FILENAME,
      });
      const expected = typeof vendorData === "string" ? Buffer.from(vendorData, "utf8") : vendorData;
      expect(payloadOf(user).equals(expected)).toBe(true);
    },
  );

  it("declares MIME-Version 1.0 and multipart/mixed in the top-level headers", () => {
    const out = buildVendorData({ installGuestAgent: true, vendorData: "#cloud-config\n" })?.toString(
      "ascii",
    );
    expect(out).toMatch(/^Content-Type: multipart\/mixed; boundary="[^"]+"\nMIME-Version: 1\.0\n\n/);
  });

  it("needs base64 for non-ASCII text: cloud-init's decoding mangles an 8bit UTF-8 part", () => {
    const text = "#cloud-config\nx: 'é✓'\n";
    const eightBit = Buffer.from(
      `Content-Type: multipart/mixed; boundary="b"\nMIME-Version: 1.0\n\n--b\nContent-Type: text/plain\nContent-Transfer-Encoding: 8bit\n\n${text}\n--b--\n`,
      "utf8",
    );
    expect(payloadOf(parseLikeCloudInit(eightBit).parts?.[0]).toString("utf8")).not.toBe(text);
  });

  it("gives the same bytes for the same inputs", () => {
    const a = buildVendorData({ installGuestAgent: true, vendorData: "#cloud-config\nruncmd: [ls]\n" });
    const b = buildVendorData({
      installGuestAgent: true,
      vendorData: Buffer.from("#cloud-config\nruncmd: [ls]\n"),
    });
    expect(a?.equals(b ?? Buffer.alloc(0))).toBe(true);
  });

  it("gives different bytes for different vendorData", () => {
    const a = buildVendorData({ installGuestAgent: true, vendorData: "#cloud-config\nruncmd: [ls]\n" });
    const b = buildVendorData({ installGuestAgent: true, vendorData: "#cloud-config\nruncmd: [pwd]\n" });
    expect(a?.equals(b ?? Buffer.alloc(0))).toBe(false);
  });

  it("never uses a boundary that occurs inside a part, even when the vendorData contains the usual one", () => {
    const first = boundaryOf(
      buildVendorData({ installGuestAgent: true, vendorData: "#cloud-config\n" }) as Buffer,
    );
    const seen = [first];
    // Each round embeds every boundary chosen so far, so the builder must move on each time.
    for (let round = 0; round < 3; round++) {
      const vendorData = `#!/bin/sh\n${seen.map((b) => `--${b}\n--${b}--\n`).join("")}`;
      const out = buildVendorData({ installGuestAgent: true, vendorData });
      if (!out) throw new Error("no vendor-data");
      const boundary = boundaryOf(out);
      expect(seen).not.toContain(boundary);
      expect(vendorData.includes(boundary)).toBe(false);
      expect(GUEST_AGENT_SCRIPT.includes(boundary)).toBe(false);
      const parsed = parseLikeCloudInit(out);
      expect(parsed.parts).toHaveLength(2);
      expect(payloadOf(parsed.parts?.[1]).toString("utf8")).toBe(vendorData);
      // Deterministic even on the collision path.
      expect(buildVendorData({ installGuestAgent: true, vendorData })?.equals(out)).toBe(true);
      seen.push(boundary);
    }
  });

  it.each([
    ["a MIME multipart", 'Content-Type: multipart/mixed; boundary="x"\nMIME-Version: 1.0\n\n--x--\n'],
    [
      "a gzip-compressed MIME multipart",
      gzipSync(Buffer.from("MIME-Version: 1.0\nContent-Type: text/plain\n\nx\n")),
    ],
    ["gzip magic bytes that do not decompress", Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x01])],
  ])("rejects %s beside the guest agent as a permanent error with the way out", (_, vendorData) => {
    const err = permanentError(() => buildVendorData({ installGuestAgent: true, vendorData }));
    expect(err.message).toMatch(/vendorData/);
  });

  it("tells MIME users how to give their vendor-data beside the provider's scripts", () => {
    for (const opts of [
      { installGuestAgent: true },
      { installGuestAgent: false, proxySetup: "#!/bin/sh\n" },
    ]) {
      const err = permanentError(() =>
        buildVendorData({ ...opts, vendorData: "MIME-Version: 1.0\nContent-Type: text/plain\n\nx\n" }),
      );
      expect(err.message).toContain("give each of its parts as a single document");
      expect(err.message).toContain("userData");
    }
  });

  it("gives the guest-agent script the proxy's packages to install with the agent when the proxy setup follows", () => {
    const alone = buildVendorData({ installGuestAgent: true })?.toString("utf8") ?? "";
    const beside =
      buildVendorData({ installGuestAgent: true, proxySetup: "#!/bin/sh\necho proxy\n" })?.toString("utf8") ??
      "";
    expect(alone).toBe(GUEST_AGENT_SCRIPT);
    expect(alone).not.toContain("install qemu-guest-agent squid");
    expect(beside).toContain(guestAgentScript(PROXY_APT_PACKAGES));
  });

  it("carries the proxy setup as a second script part, after the guest agent's, before the user's data", () => {
    const vd = buildVendorData({
      installGuestAgent: true,
      proxySetup: "#!/bin/sh\necho proxy\n",
      vendorData: "#cloud-config\n",
    });
    const text = vd?.toString("utf8") ?? "";
    const agent = text.indexOf('filename="kvm-proxy-guest-agent.sh"');
    const proxy = text.indexOf('filename="kvm-proxy-squid.sh"');
    const user = text.indexOf('filename="vendor-data"');
    expect(agent).toBeGreaterThan(0);
    expect(proxy).toBeGreaterThan(agent);
    expect(user).toBeGreaterThan(proxy);
    expect(text).toContain("#!/bin/sh\necho proxy\n");
  });

  it("is the proxy setup script alone when it is the only part", () => {
    expect(
      buildVendorData({ installGuestAgent: false, proxySetup: "#!/bin/sh\necho proxy\n" })?.toString(),
    ).toBe("#!/bin/sh\necho proxy\n");
  });
});

describe("GUEST_AGENT_SCRIPT: content", () => {
  it.each(["sh", "dash"].filter((shell) => existsSync(`/bin/${shell}`)))("passes %s -n", (shell) => {
    const result = spawnSync(`/bin/${shell}`, ["-n"], { input: GUEST_AGENT_SCRIPT });
    expect(result.stderr.toString("utf8")).toBe("");
    expect(result.status).toBe(0);
  });

  it.each([
    ["Debian/Ubuntu", /apt-get .*install .*qemu-guest-agent/],
    ["Fedora/RHEL (dnf)", /dnf -y install qemu-guest-agent/],
    ["RHEL/CentOS (yum)", /yum -y install qemu-guest-agent/],
    ["SUSE", /zypper --non-interactive install .*qemu-guest-agent/],
    ["Alpine", /apk add .*qemu-guest-agent/],
    ["systemd", /enable_unit qemu-guest-agent[\s\S]*systemctl start qemu-guest-agent/],
    ["OpenRC", /rc-update add qemu-guest-agent default[\s\S]*rc-service qemu-guest-agent start/],
  ])("installs or starts the agent on %s", (_, pattern) => {
    expect(GUEST_AGENT_SCRIPT).toMatch(pattern);
  });
});

/**
 * Runs the script against fake package and service managers: PATH holds only
 * a directory of fakes (the script appends sbin directories, which hold none
 * of the package managers on a Debian host), and each fake records its
 * arguments. The fake rc-service reports the agent stopped on `status`. The fake package manager "installs" by creating a fake qemu-ga.
 */
describe("GUEST_AGENT_SCRIPT: behaviour", () => {
  const systemAgentPaths = ["/usr/bin/qemu-ga", "/usr/sbin/qemu-ga", "/usr/libexec/qemu-ga"];

  function runScript(
    fakes: Record<string, number>,
    opts: {
      agentPresent?: boolean;
      script?: string;
      aptFailsNaming?: string;
      aptFailsAfterInstall?: boolean;
    } = {},
  ) {
    const dir = mkdtempSync(path.join(workDir, "fakes-"));
    const log = path.join(dir, "calls.log");
    writeFileSync(log, "");
    for (const [name, exitCode] of Object.entries(fakes)) {
      const installs = ["apt-get", "dnf", "yum", "zypper", "apk"].includes(name) && exitCode === 0;
      writeFileSync(
        path.join(dir, name),
        `#!/bin/sh\necho "${name} $*" >> "${log}"\n` +
          (name === "apt-get" ? `echo "env DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> "${log}"\n` : "") +
          (name === "rc-service" ? `[ "$2" = status ] && exit 3\n` : "") +
          (name === "apt-get" && opts.aptFailsNaming !== undefined
            ? `case " $* " in *" ${opts.aptFailsNaming} "*) exit 100;; esac\n`
            : "") +
          (installs
            ? `case "$*" in *install*|add*) printf '#!/bin/sh\\n' > "${dir}/qemu-ga"; /bin/chmod +x "${dir}/qemu-ga";; esac\n`
            : "") +
          (name === "apt-get" && opts.aptFailsAfterInstall === true ? "exit 100\n" : "") +
          `exit ${exitCode}\n`,
      );
      chmodSync(path.join(dir, name), 0o755);
    }
    if (opts.agentPresent) {
      writeFileSync(path.join(dir, "qemu-ga"), "#!/bin/sh\n");
      chmodSync(path.join(dir, "qemu-ga"), 0o755);
    }
    const script = path.join(dir, "script.sh");
    writeFileSync(script, opts.script ?? GUEST_AGENT_SCRIPT);
    const result = spawnSync("/bin/sh", [script], { env: { PATH: dir }, encoding: "utf8" });
    return {
      status: result.status,
      stderr: result.stderr,
      calls: readFileSync(log, "utf8").trim().split("\n").filter(Boolean),
    };
  }

  // Every service manager the script may pick is faked, so the test does not depend on the init system here.
  const services = { systemctl: 0, "rc-update": 0, "rc-service": 0, service: 0 };
  const started = (calls: string[]) =>
    calls.some((c) =>
      /^(systemctl start|rc-service qemu-guest-agent start|service qemu-guest-agent start)/.test(c),
    );

  it("runs on a host without a system qemu-ga (precondition of these tests)", () => {
    expect(systemAgentPaths.filter((p) => existsSync(p))).toEqual([]);
  });

  it("skips the install when qemu-ga is already present, and starts it", () => {
    const r = runScript({ ...services, "apt-get": 0, dnf: 0 }, { agentPresent: true });
    expect(r.status).toBe(0);
    expect(r.calls.filter((c) => /^(apt-get|dnf) /.test(c))).toEqual([]);
    expect(started(r.calls)).toBe(true);
    expect(r.stderr).toContain("already present");
  });

  it("installs with apt-get non-interactively, waiting for the dpkg lock, then starts the agent", () => {
    const r = runScript({ ...services, "apt-get": 0 });
    expect(r.status).toBe(0);
    expect(r.calls).toContain("apt-get -o DPkg::Lock::Timeout=300 -q update");
    expect(r.calls).toContain(
      "apt-get -o DPkg::Lock::Timeout=300 -q -y install --no-install-recommends qemu-guest-agent",
    );
    expect(r.calls).toContain("env DEBIAN_FRONTEND=noninteractive");
    expect(started(r.calls)).toBe(true);
  });

  it("beside the proxy setup, installs its squid in the agent's one apt-get transaction, after one update", () => {
    const r = runScript({ ...services, "apt-get": 0 }, { script: guestAgentScript(PROXY_APT_PACKAGES) });
    expect(r.status).toBe(0);
    expect(r.calls.filter((c) => c.startsWith("apt-get"))).toEqual([
      "apt-get -o DPkg::Lock::Timeout=300 -q update",
      "apt-get -o DPkg::Lock::Timeout=300 -q -y install --no-install-recommends qemu-guest-agent squid",
    ]);
    expect(started(r.calls)).toBe(true);
  });

  it("installs the agent alone when the install with the proxy's packages fails (the proxy setup installs its own)", () => {
    const r = runScript(
      { ...services, "apt-get": 0 },
      { script: guestAgentScript(PROXY_APT_PACKAGES), aptFailsNaming: "squid" },
    );
    expect(r.status).toBe(0);
    expect(r.calls).toContain(
      "apt-get -o DPkg::Lock::Timeout=300 -q -y install --no-install-recommends qemu-guest-agent",
    );
    expect(r.stderr).toContain("installing squid beside the agent failed; installing the agent alone");
    expect(started(r.calls)).toBe(true);
  });

  it("goes on when apt-get fails but the agent was installed (another package's maintainer script failed)", () => {
    const r = runScript(
      { ...services, "apt-get": 0 },
      { script: guestAgentScript(PROXY_APT_PACKAGES), aptFailsAfterInstall: true },
    );
    expect(r.status).toBe(0);
    expect(r.stderr).toContain("installing squid beside the agent failed; the agent is there");
    expect(started(r.calls)).toBe(true);
  });

  it.each(["", "-o", "squid=1.0", "squid;reboot", "Squid", "a", "squid-"])(
    "refuses %j as a package to install beside the agent (apt-get would read it as something else)",
    (name) => {
      expect(() => guestAgentScript([name])).toThrow(/not a package name apt-get reads as one/);
    },
  );

  it.each([
    ["dnf", { dnf: 0, yum: 0 }, "dnf -y install qemu-guest-agent"],
    ["yum", { yum: 0 }, "yum -y install qemu-guest-agent"],
    ["zypper", { zypper: 0 }, "zypper --non-interactive install --no-recommends qemu-guest-agent"],
    ["apk", { apk: 0 }, "apk add --wait 300 qemu-guest-agent"],
  ])("installs with %s when that is the package manager", (_, managers, call) => {
    const r = runScript({ ...services, ...managers });
    expect(r.status).toBe(0);
    expect(r.calls).toContain(call);
  });

  it("starts the agent through OpenRC when there is no systemd", () => {
    const r = runScript({ "rc-update": 0, "rc-service": 0, apk: 0 });
    expect(r.calls).toContain("rc-update add qemu-guest-agent default");
    expect(r.calls).toContain("rc-service qemu-guest-agent start");
  });

  it.each([
    ["the install fails", { ...services, "apt-get": 100 }, "installing qemu-guest-agent failed"],
    ["there is no package manager", { ...services }, "no supported package manager"],
    [
      "the service does not start",
      { "apt-get": 0, systemctl: 1, "rc-update": 1, "rc-service": 1, service: 1 },
      "starting qemu-guest-agent failed",
    ],
  ])("exits 1 with a message when %s", (_, fakes, message) => {
    const r = runScript(fakes);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(message);
  });
});
