import { describe, expect, it } from "vitest";
import { DEFAULT_MIN_AGE, parseGcArgs, UsageError } from "../../../provider/gc/command-line";

describe("parseGcArgs", () => {
  it("defaults: dry run, this project, 15 minutes, the current stack", () => {
    expect(DEFAULT_MIN_AGE).toBe("15m");
    expect(parseGcArgs([], "/proj")).toEqual({
      cwd: "/proj",
      minAgeMs: 15 * 60_000,
      allProjects: false,
      delete: false,
      json: false,
      help: false,
    });
  });

  it("reads every option", () => {
    expect(
      parseGcArgs(
        ["--stack", "prod", "--cwd", "/x", "--min-age", "1h30m", "--all-projects", "--delete", "--json"],
        "/proj",
      ),
    ).toEqual({
      cwd: "/x",
      stack: "prod",
      minAgeMs: 90 * 60_000,
      allProjects: true,
      delete: true,
      json: true,
      help: false,
    });
    expect(parseGcArgs(["--min-age", "0"], "/p").minAgeMs).toBe(0);
    expect(parseGcArgs(["--min-age=45s"], "/p").minAgeMs).toBe(45_000);
    expect(parseGcArgs(["-h"], "/p").help).toBe(true);
  });

  it.each([
    [["--force"], /Unknown option '--force'/],
    [["prune"], /Unexpected argument 'prune'/],
    [["--min-age", "soon"], /--min-age "soon" is not a duration/],
    [["--min-age=-5m"], /is not a duration/],
    [["--stack", ""], /--stack must not be empty/],
    [["--stack"], /argument missing/],
  ])("rejects %j", (argv, reason) => {
    expect(() => parseGcArgs(argv, "/p")).toThrow(UsageError);
    expect(() => parseGcArgs(argv, "/p")).toThrow(reason);
  });
});
