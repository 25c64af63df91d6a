/**
 * A host shared by stacks that know nothing of each other (issue 16, item 3):
 * two `pulumi up` processes at the same instant, coordinated only through
 * what the host holds.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  hostsConfig,
  metadataOf,
  perVmVolumesOf,
  poolVolumes,
  removeByHand,
  TEST_PROXY_ARGS,
  vmVolumeNames,
  Workspace,
} from "./harness";

let host: TestHost;
const workspaces: Workspace[] = [];
const NAME = `kvmpt-twin-${process.pid}`;

beforeAll(() => {
  host = testHost();
});

afterAll(() => {
  for (const ws of workspaces) ws.cleanup();
  removeByHand(host, NAME);
});

/** A stack of its own (its own backend) with one proxy of the fixed name, its user-data marked with `marker`. */
function stack(tag: string, marker: string): Workspace {
  const ws = new Workspace(tag, { name: "kvmpt-shared", main: "test/pulumi/programs/pair" });
  workspaces.push(ws);
  ws.setConfig({
    ...hostsConfig(host),
    "pair:proxies": {
      twin: {
        host: "local",
        image: "tiny",
        name: NAME,
        ...TEST_PROXY_ARGS,
        userData: `#cloud-config\n# ${marker}\n`,
      },
    },
  });
  return ws;
}

function sha256(file: string): string {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

describe("two stacks on one host", () => {
  it("creating one fixed name at the same instant: one wins, the other fails naming the domain, and the winner's disks are untouched", async () => {
    const a = stack("twin-a", `stack-a-${process.pid}`);
    const b = stack("twin-b", `stack-b-${process.pid}`);
    const [ra, rb] = await Promise.all([
      a.runAsync(["up", "--yes", "--skip-preview"]),
      b.runAsync(["up", "--yes", "--skip-preview"]),
    ]);
    const codes = [ra.code, rb.code];
    expect(
      codes.filter((c) => c === 0),
      `${ra.output}\n${rb.output}`,
    ).toHaveLength(1);
    const [winner, loser, lost] = ra.code === 0 ? [a, b, rb] : [b, a, ra];
    expect(lost.output).toContain(`domain ${NAME}`);
    expect(lost.output).toMatch(/already exists|was left alone/);

    // One domain, the winner's, on the winner's own volumes; the loser left none of its own.
    expect(allDomains(host).filter((d) => d === NAME)).toEqual([NAME]);
    expect(metadataOf(host, NAME)).toContain(`stack="${winner.stack}"`);
    const mine = vmVolumeNames(host, NAME);
    expect(perVmVolumesOf(poolVolumes(host), NAME)).toEqual([...mine].sort());
    const [root, seed] = mine.map((v) => path.join(host.poolPath, v)) as [string, string];
    const winnerMarker = winner === a ? `stack-a-${process.pid}` : `stack-b-${process.pid}`;
    const loserMarker = winner === a ? `stack-b-${process.pid}` : `stack-a-${process.pid}`;
    expect(readFileSync(seed).includes(winnerMarker)).toBe(true);
    expect(readFileSync(seed).includes(loserMarker)).toBe(false);

    // The loser tries again: refused again, and the winner's disks are the same bytes before and after.
    const before = { root: sha256(root), seed: sha256(seed) };
    const again = await loser.runAsync(["up", "--yes", "--skip-preview"]);
    expect(again.code).not.toBe(0);
    expect(again.output).toContain(`domain ${NAME}`);
    expect({ root: sha256(root), seed: sha256(seed) }).toEqual(before);
    expect(perVmVolumesOf(poolVolumes(host), NAME)).toEqual([...mine].sort());
    winner.destroy();
    expect(allDomains(host)).not.toContain(NAME);
    expect(perVmVolumesOf(poolVolumes(host), NAME)).toEqual([]);
  });
});
