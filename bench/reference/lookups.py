#!/usr/bin/python3
"""Reference for the RPC figure: libvirt's C client (python3-libvirt), one connection,
N sequential virDomainLookupByName calls of an existing domain.

usage: lookups.py URI DOMAIN N WARMUP LIBVIRTD_PID

Prints one JSON object: seconds for the N timed calls, libvirtd's CPU clock ticks
(utime + stime) over them, and this process's own CPU seconds over them. Connection
set-up and warm-up are outside the timed part, as in the TypeScript harness.
"""
import json
import os
import sys
import time

import libvirt


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split(" ")
    return int(fields[11]) + int(fields[12])


def main():
    uri, name, n, warmup, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    # Errors go to the exception, not to stderr as well.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    conn = libvirt.open(uri)
    try:
        for _ in range(warmup):
            conn.lookupByName(name)
        t0 = ticks(pid)
        c0 = os.times()
        start = time.perf_counter()
        for _ in range(n):
            conn.lookupByName(name)
        seconds = time.perf_counter() - start
        c1 = os.times()
        t1 = ticks(pid)
    finally:
        conn.close()
    client_cpu = (c1.user - c0.user) + (c1.system - c0.system)
    print(json.dumps({"seconds": seconds, "calls": n, "daemonTicks": t1 - t0, "clientCpuSeconds": client_cpu}))


if __name__ == "__main__":
    main()
