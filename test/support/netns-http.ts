/**
 * Small HTTP servers the tests run inside network namespaces (targets for
 * guests and their proxies, the image for the provider), stopped by PID.
 */
import { type ChildProcess, spawn } from "node:child_process";

/**
 * A Python HTTP server inside a network namespace. Modes: `204 ADDR [PORT]`
 * answers every GET with 204; `whoami ADDR [PORT]` answers 200 with the
 * client's address (what a target sees as a proxy's source), `/bytes/N`
 * with N bytes, and `/status/N` with status N; `files ADDR DIR [LOG]` serves DIR's files (appending
 * `<status> <path>` per request to LOG when given). It binds PORT (default 0:
 * any; ADDR `::`: every address, IPv4 and IPv6) and prints the port it got.
 */
const SERVER = `
import http.server, socket, sys
mode, addr = sys.argv[1], sys.argv[2]
class NoContent(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204)
        self.end_headers()
    def log_message(self, *a):
        pass
class WhoAmI(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/status/"):
            body = b"as asked"
            self.send_response(int(self.path[8:]))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/bytes/"):
            n = int(self.path[7:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            while n > 0:
                self.wfile.write(chunk[: min(n, len(chunk))])
                n -= len(chunk)
            return
        body = self.client_address[0].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class Files(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=sys.argv[3], **k)
    def log_message(self, *a):
        pass
    def log_request(self, code="-", size="-"):
        if len(sys.argv) > 4:
            with open(sys.argv[4], "a") as log:
                log.write("%s %s\\n" % (getattr(code, "value", code), self.path))
class Server(http.server.ThreadingHTTPServer):
    # "::" listens on every IPv6 and (v4-mapped) IPv4 address of the namespace.
    address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
port = int(sys.argv[3]) if mode in ("204", "whoami") and len(sys.argv) > 3 else 0
srv = Server((addr, port), {"204": NoContent, "whoami": WhoAmI}.get(mode, Files))
print(srv.server_address[1], flush=True)
srv.serve_forever()
`;

export function startServer(servers: ChildProcess[], netns: string, args: string[]): Promise<number> {
  // `ip netns exec` execs the program, so the child's PID is the server's.
  const child = spawn("ip", ["netns", "exec", netns, "/usr/bin/python3", "-c", SERVER, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  servers.push(child);
  return new Promise((resolve, reject) => {
    let out = "";
    let err = "";
    const timer = setTimeout(() => reject(new Error(`HTTP server ${args.join(" ")} did not start`)), 30_000);
    child.stderr?.on("data", (d: Buffer) => {
      err += d.toString();
    });
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const line = out.split("\n")[0] ?? "";
      if (out.includes("\n") && /^\d+$/.test(line)) {
        clearTimeout(timer);
        resolve(Number(line));
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`HTTP server ${args.join(" ")} exited (${code}): ${err}`));
    });
  });
}

export async function stopServer(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  process.kill(child.pid, "SIGTERM");
  const timer = setTimeout(() => {
    if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
  }, 5_000);
  await exited;
  clearTimeout(timer);
}

/** A `whoami` server on `addr` in `netns`; its base URL (`http://addr:port`, IPv6 in brackets). */
export async function startWhoAmI(servers: ChildProcess[], netns: string, addr: string): Promise<string> {
  const port = await startServer(servers, netns, ["whoami", addr]);
  return `http://${addr.includes(":") ? `[${addr}]` : addr}:${port}`;
}
