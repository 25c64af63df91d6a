import { describe, expect, it } from "vitest";
import { parseRetireArgs } from "../../../provider/retire/retire-command";

describe("retire and block's command lines", () => {
  it.each<["retire" | "block", string[], object]>([
    [
      "retire",
      ["edge-2", "--reason", "blocked by example.com"],
      { kind: "retire", target: "edge-2", reason: "blocked by example.com", cwd: "/p", help: false },
    ],
    [
      "retire",
      ["edge-2", "--reason", "r", "--stack", "prod", "-C", "/q"],
      { target: "edge-2", stack: "prod", cwd: "/q" },
    ],
    [
      "block",
      ["2001:DB8::61", "--reason", "403s", "--for", "7d"],
      { kind: "block", target: "2001:db8::61", forSeconds: 604_800 },
    ],
    ["block", ["-h"], { help: true }],
  ])("%s %j", (kind, argv, want) => {
    expect(parseRetireArgs(kind, argv, "/p")).toMatchObject(want);
  });

  it.each<["retire" | "block", string[], string]>([
    ["retire", ["--reason", "r"], "retire takes one proxy name"],
    ["retire", ["a", "b", "--reason", "r"], "retire takes one proxy name"],
    ["retire", ["edge-2"], "--reason must be a non-empty string"],
    ["retire", ["edge-2", "--reason", "two\nlines"], "--reason must be one line"],
    ["retire", ["edge-2", "--reason", "r", "--for", "7d"], "--for applies to block only"],
    ["block", ["edge-2", "--reason", "r", "--for", "7d"], '"edge-2" is not an IPv4 or IPv6 address'],
    ["block", ["192.0.2.61", "--reason", "r"], "--for must be a duration"],
    ["block", ["192.0.2.61", "--reason", "r", "--for", "0"], "--for must be a duration"],
    ["block", ["192.0.2.61", "--reason", "r", "--for=-1d"], "--for must be a duration"],
    ["retire", ["edge-2", "--reason", "r", "--delete"], "Unknown option '--delete'"],
  ])("%s %j is refused", (kind, argv, message) => {
    expect(() => parseRetireArgs(kind, argv, "/p")).toThrow(message);
  });
});
