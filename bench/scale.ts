/**
 * Figure 7b: how the upload cost grows with the image size. The same
 * contenders as figure 2 (ours and virsh vol-upload, unix socket and SSH),
 * timed the same way, at the sizes of KVMP_BENCH_SCALE_MIB (default 1 and 64
 * MiB); figure 2's size (1 GiB by default) is the largest point.
 */
import { config, log, rotate, sshTransport, sshUri, unixTransport, unixUri } from "./common";
import { dropMemoryPool, ours, readThrough, sourceFile, type UploadSample, Volumes, virsh } from "./upload";

export type ScaleContender = "oursUnix" | "virshUnix" | "oursSsh" | "virshSsh";

export interface ScalePoint {
  bytes: number;
  samples: Record<ScaleContender, UploadSample[]>;
}

export interface ScaleResults {
  rounds: number;
  points: ScalePoint[];
}

export async function benchScale(): Promise<ScaleResults> {
  const points: ScalePoint[] = [];
  for (const mib of config.scaleMiB) {
    const bytes = mib * 1024 * 1024;
    const file = sourceFile(bytes);
    await readThrough(file);
    const { volumes, conn } = await Volumes.open(bytes);
    const contenders: [ScaleContender, () => Promise<UploadSample>][] = [
      ["oursUnix", () => ours(volumes, unixTransport, file, bytes)],
      ["virshUnix", () => virsh(volumes, unixUri(), file, bytes)],
      ["oursSsh", () => ours(volumes, sshTransport, file, bytes)],
      ["virshSsh", () => virsh(volumes, sshUri(), file, bytes)],
    ];
    const samples = Object.fromEntries(contenders.map(([n]) => [n, [] as UploadSample[]])) as Record<
      ScaleContender,
      UploadSample[]
    >;
    try {
      for (let round = 0; round < config.scaleRounds; round++) {
        for (const [name, runOne] of rotate(contenders, round)) {
          const s = await runOne();
          samples[name].push(s);
          log(`scale ${mib} MiB round ${round + 1}/${config.scaleRounds} ${name}: ${s.seconds.toFixed(3)} s`);
        }
      }
    } finally {
      await conn.close();
      await dropMemoryPool();
    }
    points.push({ bytes, samples });
  }
  return { rounds: config.scaleRounds, points };
}
