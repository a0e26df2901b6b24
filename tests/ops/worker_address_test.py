#!/usr/bin/python3
"""A worker advertises the address this host reaches the dispatcher from (docs/operations.md), not
127.0.0.1, unless --host says otherwise; a consumer reads through that address. Needs a
non-loopback IPv4 address on this machine; without one it says so and passes.

Usage: worker_address_test.py STOKER
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

from ops_common import fail, read, wait_for

STOKER = sys.argv[1]


def main():
    # This host's address on its default route (nothing is sent).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            ip = s.getsockname()[0]
        except OSError:
            ip = ""
    if not ip or ip.startswith("127."):
        print("SKIP: this machine has no non-loopback IPv4 address")
        return
    work = tempfile.mkdtemp(prefix="stoker-address-")
    procs = []

    def start(name, args):
        p = subprocess.Popen(args, stdout=open(os.path.join(work, f"{name}.out"), "w"),
                             stderr=subprocess.STDOUT)
        procs.append(p)
        return os.path.join(work, f"{name}.out")

    try:
        out = start("dispatcher", [STOKER, "dispatcher", "--port", "0", "--http-port", "0"])
        port = wait_for(lambda: re.search(r"serving on port (\d+)", read(out)), "dispatcher").group(1)
        # Reached at this host's address: the worker advertises that address.
        out = start("w1", [STOKER, "worker", "--dispatcher", f"{ip}:{port}", "--http-port", "0"])
        advertised = wait_for(lambda: re.search(r"serving on (\S+),", read(out)), "w1").group(1)
        if not advertised.startswith(ip + ":"):
            fail(f"worker advertises {advertised}, expected {ip}:PORT")
        # --host overrides it.
        out = start("w2", [STOKER, "worker", "--dispatcher", f"{ip}:{port}", "--http-port", "0",
                           "--host", "localhost"])
        advertised2 = wait_for(lambda: re.search(r"serving on (\S+),", read(out)), "w2").group(1)
        if not advertised2.startswith("localhost:"):
            fail(f"worker with --host localhost advertises {advertised2}")
        spec = os.path.join(work, "spec.json")
        with open(spec, "w") as f:
            json.dump({"source": {"range": 1000}}, f)
        r = subprocess.run([STOKER, "consume", "--dispatcher", f"{ip}:{port}", spec,
                            "--print-keys"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or len(set(r.stdout.split())) != 1000:
            fail(f"consume through {advertised}: {r.returncode} {r.stderr}")
        print(f"worker advertised {advertised}; with --host: {advertised2}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    print("worker address test: OK")


if __name__ == "__main__":
    main()
