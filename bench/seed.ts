/**
 * Figure 2g: a seed-sized upload (368,640 bytes, the seed ISO every create
 * uploads) over SSH against the unix socket. Each contender has its own
 * established connection and volume; per round each uploads once, in rotated
 * order, timed from the call to libvirtd's confirmation plus one call after
 * it (create's next step asks for the volume's path), so a wait pushed onto
 * the next call is counted too. Contenders: the unix socket; ssh2 (the
 * default transport); ssh2 without the quick acknowledgements (what every
 * upload over SSH waited before, bench/notes.md); the OpenSSH transport.
 */
import type { Transport } from "../provider/transport/types";
import {
  config,
  connect,
  log,
  median,
  opensshTransport,
  rotate,
  sshTransport,
  sshTransportNoQuickAck,
  unixTransport,
} from "./common";
import { dropMemoryPool, uploadPoolName, Volumes } from "./upload";

export const SEED_BYTES = 368_640;

export type SeedContender = "unix" | "ssh2" | "ssh2NoQuickAck" | "openssh";

export interface SeedResults {
  bytes: number;
  rounds: number;
  /** Milliseconds per upload (plus the call after it), per contender, in round order. */
  ms: Record<SeedContender, number[]>;
}

export async function benchSeed(): Promise<SeedResults> {
  const data = Buffer.alloc(SEED_BYTES, 0x5a);
  const { volumes, conn: admin } = await Volumes.open(SEED_BYTES);
  const makers: [SeedContender, () => Transport][] = [
    ["unix", unixTransport],
    ["ssh2", sshTransport],
    ["ssh2NoQuickAck", sshTransportNoQuickAck],
    ["openssh", opensshTransport],
  ];
  const open = await Promise.all(
    makers.map(async ([name, make]) => {
      const vname = await volumes.create(`seed-${name}`);
      const c = connect(make);
      const pool = await c.lv.storagePoolLookupByName(uploadPoolName());
      return { name, ...c, vol: await c.lv.storageVolLookupByName(pool, vname), vname };
    }),
  );
  const ms = Object.fromEntries(makers.map(([n]) => [n, [] as number[]])) as Record<SeedContender, number[]>;
  try {
    // Two untimed rounds: connections and JIT warm.
    for (let round = -2; round < config.seedRounds; round++) {
      for (const c of rotate(open, Math.max(round, 0))) {
        const start = process.hrtime.bigint();
        await c.lv.storageVolUpload(c.vol, [data]);
        await c.lv.storageVolGetPath(c.vol);
        if (round >= 0) ms[c.name].push(Number(process.hrtime.bigint() - start) / 1e6);
      }
    }
    log(
      `seed ${SEED_BYTES} bytes, ${config.seedRounds} rounds, medians: ${makers
        .map(([n]) => `${n} ${median(ms[n]).toFixed(1)} ms`)
        .join(", ")}`,
    );
  } finally {
    for (const c of open) {
      await c.conn.close();
      await volumes.remove(c.vname);
    }
    await admin.close();
    await dropMemoryPool();
  }
  return { bytes: SEED_BYTES, rounds: config.seedRounds, ms };
}
