/**
 * A serial console's bytes as lines for an error message: terminal control
 * sequences and carriage returns dropped, secrets and credential-like pairs
 * masked (as the guest's own log lines are), the last lines kept.
 */
import { lastLines, redactGuestLines } from "./cloud-init-result";

/** Lines of console output shown in an error. */
export const CONSOLE_LINES = 30;

// Cursor placement and screen clearing (CSI … H, f, J): where a screen-drawing program starts a new line.
// biome-ignore lint/suspicious/noControlCharactersInRegex: removing terminal escapes is the point
const CURSOR = /\u001b\[[0-9;]*[HfJ]/g;
// Other CSI sequences (colours, modes), OSC titles, two-byte escapes.
// biome-ignore lint/suspicious/noControlCharactersInRegex: removing terminal escapes is the point
const ESCAPES = /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)|\u001b[@-_]/g;
// Control characters but tab and newline, C1 controls, line and paragraph separators.
// biome-ignore lint/suspicious/noControlCharactersInRegex: removing control characters is the point
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/g;

/** The console's last `n` non-blank lines, masked; empty when it printed nothing readable. */
export function consoleLines(text: string, secrets: readonly string[] = [], n = CONSOLE_LINES): string[] {
  const plain = text
    .replace(/\r\n?/g, "\n")
    .replace(CURSOR, "\n")
    .replace(ESCAPES, "")
    .replace(CONTROLS, "")
    // Pulumi's colour markup, defused.
    .replace(/<\{%/g, "<{ %");
  const readable = redactGuestLines(plain, secrets)
    .split("\n")
    .filter((l) => l.trim() !== "")
    .join("\n");
  return readable === "" ? [] : lastLines(readable, n);
}

/** The console's lines under their header, or nothing. */
export function consoleLinesText(lines: readonly string[]): string[] {
  if (lines.length === 0) return [];
  return ["last lines of the guest's serial console:", ...lines.map((l) => `  | ${l}`)];
}
