/** The package's command (`pulumi-kvm-proxy`) run in-process: its exit code and what it printed. */
import { main } from "../../provider/cli/main";

export async function runCli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const code = await main(
    argv,
    (s) => {
      out += s;
    },
    (s) => {
      err += s;
    },
  );
  return { code, out, err };
}
