/**
 * `pulumi-resource-kvmproxy`: the provider plugin's process. The engine
 * starts it with its own address as the last argument; it serves on a port
 * of 127.0.0.1 and prints that port, the one line the engine reads from its
 * stdout.
 */

import { messageOf } from "../errors";
import { sharedRuntime } from "../resource/provider";
import { serve } from "./server";

serve(sharedRuntime()).then(
  ({ port }) => {
    process.stdout.write(`${port}\n`);
  },
  (err: unknown) => {
    process.stderr.write(`pulumi-resource-kvmproxy: ${messageOf(err)}\n`);
    process.exit(1);
  },
);
