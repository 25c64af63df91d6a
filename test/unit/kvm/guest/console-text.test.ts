import { describe, expect, it } from "vitest";
import { consoleLines, consoleLinesText } from "../../../../provider/kvm/guest/console-text";

const ESC = "\u001b";

describe("serial console text for an error message", () => {
  it.each([
    ["carriage returns", "one\r\ntwo\rthree", ["one", "two", "three"]],
    ["colours and modes", `${ESC}[1m${ESC}[33m${ESC}[40mMapping table${ESC}[0m${ESC}[=3h`, ["Mapping table"]],
    [
      "cursor placement starts a line",
      `Press ESC in 2${ESC}[05;01HPress ESC in 1`,
      ["Press ESC in 2", "Press ESC in 1"],
    ],
    ["screen clearing", `${ESC}[2J${ESC}[01;01HBdsDxe: loading Boot0001`, ["BdsDxe: loading Boot0001"]],
    ["an OSC title", `${ESC}]0;root@kvmp: ~\u0007$ ls`, ["$ ls"]],
    ["other control characters", "a\u0000b\u0008c\u007fd\u009be", ["abcde"]],
    ["blank lines", "a\n\n   \nb\n", ["a", "b"]],
    ["Pulumi's colour markup", "<{%reset%}>x", ["<{ %reset%}>x"]],
  ])("drops %s", (_what, text, lines) => {
    expect(consoleLines(text)).toEqual(lines);
  });

  it("masks the given secrets and credential-like pairs", () => {
    const lines = consoleLines("proxy hunter2-secret up\nhttp://u:pw@host/ password=abc\n", [
      "hunter2-secret",
    ]);
    expect(lines).toEqual(["proxy *** up", "http://***:***@host/ password=***"]);
  });

  it("a secret split by an escape is still masked", () => {
    expect(consoleLines(`key ${"hunter2"}${ESC}[0m-secret`, ["hunter2-secret"])).toEqual(["key ***"]);
  });

  it("keeps the last lines only", () => {
    const text = Array.from({ length: 100 }, (_, i) => `line ${i}`).join("\r\n");
    expect(consoleLines(text, [], 3)).toEqual(["line 97", "line 98", "line 99"]);
  });

  it("nothing readable gives no lines, and no header", () => {
    expect(consoleLines(`${ESC}[2J${ESC}[01;01H\r\n`)).toEqual([]);
    expect(consoleLinesText([])).toEqual([]);
  });

  it("lines come under a header naming the console", () => {
    expect(consoleLinesText(["login:"])).toEqual(["last lines of the guest's serial console:", "  | login:"]);
  });
});
