/** The SHA-256 (hex) of a file, streamed (guest images are hundreds of MiB). */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";

export function sha256File(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const h = createHash("sha256");
    createReadStream(file)
      .on("data", (c) => h.update(c))
      .on("error", reject)
      .on("end", () => resolve(h.digest("hex")));
  });
}
