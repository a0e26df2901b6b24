#!/usr/bin/python3
"""--bind ADDRESS (docs/operations.md, "Listening addresses") from another host: two network
namespaces on one bridge (scripts/netns-cluster), "server" and "client".

In "server": a dispatcher and a worker started with `--bind 127.0.0.1`, a dispatcher started with
`--bind` the server's own address, and one started without --bind (every interface, the default).
From "client", a TCP connection to each port at the server's address must be refused for the
loopback-bound ones (gRPC and HTTP: status page, /metrics, /healthz) and accepted for the others;
inside "server" the loopback-bound ones answer on 127.0.0.1 (a job is read through them, the worker
advertising 127.0.0.1), and the one bound to the server's address does not. Outside the
namespaces, `stoker demo` must serve loopback only and not warn about plaintext on every interface.

Skips (with a message) only where network namespaces cannot be created (not root, no iproute2).

Usage: bind_test.py STOKER SOURCE_DIR OUT_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from ops_common import (can_create_namespaces, fail, load_netns_cluster, read,
                        stop_and_keep_logs, wait_for)

STOKER, SOURCE_DIR, OUT_DIR = sys.argv[1:4]

# Connects to HOST PORT and prints "open", "refused" or the error's name (run inside a namespace).
PROBE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("open")
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print(type(e).__name__)
"""


def main():
    why_not = can_create_namespaces()
    if why_not:
        print(f"SKIP: cannot create network namespaces here: {why_not}")
        return
    netns = load_netns_cluster(SOURCE_DIR)
    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stoker-bind-")
    procs = []

    def start(cluster, name, argv):
        out = os.path.join(work, f"{name}.out")
        p = subprocess.Popen(cluster.argv("server", argv) if cluster else argv,
                             stdout=open(out, "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        return out

    def ports(out, what):
        m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)", read(out)),
                     what, timeout=60)
        return int(m.group(1)), int(m.group(2))

    try:
        with netns.Cluster(["server", "client"], state_dir=os.path.join(work, "netns")) as cluster:
            server = cluster.addr("server")

            def probe(host, address, port):
                r = subprocess.run(cluster.argv(host, ["/usr/bin/python3", "-c", PROBE, address,
                                                       str(port)]),
                                   capture_output=True, text=True, timeout=30)
                return r.stdout.strip() or r.stderr.strip()

            loop_out = start(cluster, "dispatcher-loopback",
                             [STOKER, "dispatcher", "--bind", "127.0.0.1", "--port", "0",
                              "--http-port", "0"])
            own_out = start(cluster, "dispatcher-own",
                            [STOKER, "dispatcher", "--bind", server, "--port", "0",
                             "--http-port", "0"])
            all_out = start(cluster, "dispatcher-all",
                            [STOKER, "dispatcher", "--port", "0", "--http-port", "0"])
            loop_grpc, loop_http = ports(loop_out, "the loopback dispatcher")
            own_grpc, own_http = ports(own_out, "the dispatcher on the server's address")
            all_grpc, all_http = ports(all_out, "the dispatcher on every interface")
            worker_out = start(cluster, "worker-loopback",
                               [STOKER, "worker", "--bind", "127.0.0.1", "--dispatcher",
                                f"127.0.0.1:{loop_grpc}", "--http-port", "0"])
            m = wait_for(lambda: re.search(r"worker: serving on (\S+):(\d+), /healthz on port (\d+)",
                                           read(worker_out)), "the loopback worker", timeout=60)
            if m.group(1) != "127.0.0.1":
                fail(f"the worker bound to 127.0.0.1 advertises {m.group(1)}: {read(worker_out)}")
            worker_grpc, worker_http = int(m.group(2)), int(m.group(3))

            # From the other host: loopback-bound ports refused, the others open.
            expected = {
                ("dispatcher --bind 127.0.0.1 gRPC", loop_grpc): "refused",
                ("dispatcher --bind 127.0.0.1 HTTP", loop_http): "refused",
                ("worker --bind 127.0.0.1 gRPC", worker_grpc): "refused",
                ("worker --bind 127.0.0.1 HTTP", worker_http): "refused",
                (f"dispatcher --bind {server} gRPC", own_grpc): "open",
                (f"dispatcher --bind {server} HTTP", own_http): "open",
                ("dispatcher (default) gRPC", all_grpc): "open",
                ("dispatcher (default) HTTP", all_http): "open",
            }
            seen = {}
            for (what, port), want in expected.items():
                seen[what] = got = probe("client", server, port)
                if got != want:
                    fail(f"{what} (port {port}) from another host at {server}: {got}, expected "
                         f"{want}")
            # On the server itself: loopback answers where bound there, not where bound to the
            # server's address only.
            for what, port, want in [("dispatcher --bind 127.0.0.1 gRPC", loop_grpc, "open"),
                                     ("dispatcher --bind 127.0.0.1 HTTP", loop_http, "open"),
                                     ("worker --bind 127.0.0.1 HTTP", worker_http, "open"),
                                     (f"dispatcher --bind {server} gRPC on 127.0.0.1", own_grpc,
                                      "refused")]:
                got = probe("server", "127.0.0.1", port)
                if got != want:
                    fail(f"{what} (port {port}) on the server's loopback: {got}, expected {want}")

            # The loopback-bound pair serves a job on the server (the worker reached at 127.0.0.1),
            # and only the servers on every interface warn about plaintext.
            spec = os.path.join(work, "spec.json")
            with open(spec, "w") as f:
                json.dump({"source": {"range": 500}, "ops": [{"op": "batch", "size": 50}]}, f)
            r = subprocess.run(cluster.argv("server", [STOKER, "consume", "--dispatcher",
                                                       f"127.0.0.1:{loop_grpc}", spec,
                                                       "--print-keys"]),
                               capture_output=True, text=True, timeout=120)
            keys = r.stdout.split()
            if r.returncode != 0 or sorted(keys, key=int) != [str(i) for i in range(500)]:
                fail(f"consume through the loopback-bound servers: rc {r.returncode}, "
                     f"{len(keys)} keys: {r.stderr[-2000:]}")
            for out in (loop_out, worker_out):
                if "plaintext" in read(out):
                    fail(f"a loopback-bound server warns about plaintext: {read(out)}")
            if "serving plaintext gRPC on 0.0.0.0:" not in read(all_out):
                fail(f"the dispatcher on every interface does not warn: {read(all_out)}")
            if f"serving plaintext gRPC on {server}:" not in read(own_out):
                fail(f"the dispatcher on {server} does not name its address: {read(own_out)}")
            print(f"from another host: {seen}")

        # stoker demo: loopback only, no plaintext warning.
        demo = subprocess.run([STOKER, "demo", "--images", "64"], capture_output=True, text=True,
                              timeout=300)
        if demo.returncode != 0 or "every image exactly once: yes" not in demo.stdout:
            fail(f"stoker demo failed: {demo.stdout}{demo.stderr}")
        if "plaintext" in demo.stderr or "0.0.0.0" in demo.stderr:
            fail(f"stoker demo warns about its servers: {demo.stderr}")
        print("stoker demo: loopback only, no warning")
    finally:
        stop_and_keep_logs(procs, work, OUT_DIR)
    print("bind test: OK")


if __name__ == "__main__":
    main()
