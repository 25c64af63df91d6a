/**
 * Who answers ARP and Neighbour Discovery for an address, sampled from inside
 * the test host's namespace while something else runs (a replacement): each
 * round sends one ARP request (iputils arping, waiting for a second reply
 * for one second) and one neighbour solicitation (ndisc6, every answer for
 * 0.7 s), and records every link-layer address that answered. Two VMs
 * holding one address show as two MACs in one round.
 */
import { type ChildProcess, spawn } from "node:child_process";

export interface NeighbourRound {
  /** Seconds since the epoch at the round's start. */
  at: number;
  /** MACs (lower case) that answered ARP, then ND. */
  v4: string[];
  v6: string[];
}

export class NeighbourWatch {
  private readonly child: ChildProcess;
  private output = "";

  constructor(netns: string, dev: string, address4: string, address6: string) {
    const script = [
      "while :; do",
      '  echo "round $(date +%s.%N)"',
      `  arping -c 2 -w 1 -I ${dev} ${address4} | sed -n 's/^Unicast reply from .* \\[\\(.*\\)\\].*/v4 \\1/p'`,
      `  ndisc6 -m -n -r 1 -w 700 ${address6} ${dev} | sed -n 's/^Target link-layer address: /v6 /p'`,
      "done",
    ].join("\n");
    this.child = spawn("ip", ["netns", "exec", netns, "bash", "-c", script], {
      stdio: ["ignore", "pipe", "inherit"],
      detached: true,
    });
    this.child.stdout?.on("data", (d: Buffer) => {
      this.output += d.toString();
    });
  }

  /** The complete rounds so far (the one in progress left out). */
  rounds(): NeighbourRound[] {
    return parseRounds(this.output).slice(0, -1);
  }

  /** Waits until `n` more complete rounds have been recorded. */
  async more(n: number): Promise<void> {
    const want = this.rounds().length + n;
    while (this.rounds().length < want) await new Promise((r) => setTimeout(r, 200));
  }

  /** Ends the loop and the probe it runs (one process group). */
  stop(): void {
    if (this.child.pid !== undefined && this.child.exitCode === null)
      process.kill(-this.child.pid, "SIGKILL");
  }
}

/** Reads the watcher's output: a "round <t>" line, then "v4 <mac>" / "v6 <mac>" lines. */
export function parseRounds(text: string): NeighbourRound[] {
  const rounds: NeighbourRound[] = [];
  for (const line of text.split("\n")) {
    const [kind, value] = line.trim().split(/\s+/);
    if (kind === "round") rounds.push({ at: Number(value), v4: [], v6: [] });
    else if ((kind === "v4" || kind === "v6") && value !== undefined)
      rounds.at(-1)?.[kind].push(value.toLowerCase());
  }
  return rounds;
}

/** The distinct MACs that answered in a round, both families together. */
export function answerers(round: NeighbourRound): string[] {
  return [...new Set([...round.v4, ...round.v6])];
}
