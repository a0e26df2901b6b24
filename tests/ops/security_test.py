#!/usr/bin/python3
"""TLS and tokens on the service (docs/security.md) with real processes: certificates made here
with the openssl CLI, a dispatcher and a worker serving TLS with separate client and worker tokens,
and consumers configured right and wrong. Checks from the outside: the keys a consumer prints, exit
codes, the refused side's message (what to configure), the refusing side's log line, and that no
token or key material shows in any process's output, status page or /metrics.

Usage: security_test.py STOKER [PYTHONPATH]   (with PYTHONPATH: Python's distribute(...) too)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from ops_common import fail, http_get, read, wait_for

STOKER = sys.argv[1]
PYTHONPATH = sys.argv[2] if len(sys.argv) > 2 else ""
CLIENT_TOKEN = "c1ient-t0ken-" + os.urandom(8).hex()
WORKER_TOKEN = "w0rker-t0ken-" + os.urandom(8).hex()
N = 500


def openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"openssl {' '.join(args)}: {r.stderr}")


def make_certs(d):
    """A CA, a certificate for 127.0.0.1/localhost it signed (servers, and clients under mutual
    TLS), and a second CA that signed nothing here."""
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{ca}.key",
                "-out", f"{d}/{ca}.pem", "-days", "2", "-subj", f"/CN=stoker test {ca}")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/host.key", "-out",
            f"{d}/host.csr", "-subj", "/CN=localhost")
    openssl("x509", "-req", "-in", f"{d}/host.csr", "-CA", f"{d}/ca.pem", "-CAkey",
            f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/host.pem", "-days", "2",
            "-extfile", ext)


class Cluster:
    def __init__(self, work):
        self.work = work
        self.procs = []
        self.outputs = []

    def start(self, name, args):
        path = os.path.join(self.work, f"{name}.out")
        p = subprocess.Popen([STOKER, *args], stdout=open(path, "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.outputs.append(path)
        return path

    def run(self, name, args, env=None, timeout=60):
        """A consumer: (rc, output), its output kept for the secrets check."""
        t0 = time.time()
        r = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
        path = os.path.join(self.work, f"{name}.out")
        with open(path, "w") as f:
            f.write(r.stdout + r.stderr)
        self.outputs.append(path)
        return r.returncode, r.stdout, r.stderr, time.time() - t0

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def dispatcher(c, name, extra):
    out = c.start(name, ["dispatcher", "--port", "0", "--http-port", "0", *extra])
    m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)", read(out)),
                 f"{name} to start")
    return f"127.0.0.1:{m.group(1)}", int(m.group(2)), out


def worker(c, name, address, extra):
    out = c.start(name, ["worker", "--dispatcher", address, "--host", "127.0.0.1", "--http-port",
                         "0", "--drain-timeout-ms", "0", *extra])
    m = wait_for(lambda: re.search(r"/healthz on port (\d+)", read(out)), f"{name} to start")
    return int(m.group(1)), out


def expect_refused(c, name, args, *needles, env=None, within=8):
    rc, out, err, took = c.run(name, args, env=env)
    if rc == 0:
        fail(f"{name}: expected a refusal, got rc 0 with {len(out.split())} keys")
    for n in needles:
        if n not in err:
            fail(f"{name}: the error does not say {n!r}:\n{err}")
    if took > within:
        fail(f"{name}: the refusal took {took:.1f} s (more than {within} s)")
    print(f"{name}: refused in {took:.2f} s: {err.strip().splitlines()[-1]}")


def expect_keys(c, name, args, env=None):
    rc, out, err, _ = c.run(name, args, env=env)
    keys = out.split()
    if rc != 0 or sorted(keys) != sorted(set(keys)) or len(keys) != N:
        fail(f"{name}: rc {rc}, {len(keys)} keys ({len(set(keys))} distinct), expected {N}:\n"
             f"{err}")
    print(f"{name}: {N} distinct keys")


def main():
    work = tempfile.mkdtemp(prefix="stoker-security-")
    c = Cluster(work)
    try:
        make_certs(work)
        tok, wtok, bad = (os.path.join(work, n) for n in ("token", "worker-token", "bad-token"))
        for path, value in ((tok, CLIENT_TOKEN), (wtok, WORKER_TOKEN), (bad, "not-the-token")):
            with open(path, "w") as f:
                f.write(value + "\n")
        spec = os.path.join(work, "spec.json")
        with open(spec, "w") as f:
            json.dump({"source": {"range": N}}, f)
        ca, cert, key = (os.path.join(work, n) for n in ("ca.pem", "host.pem", "host.key"))
        serve = ["--tls-cert", cert, "--tls-key", key]

        # TLS, a client token and a separate worker token.
        address, d_http, _ = dispatcher(c, "dispatcher", [*serve, "--token-file", tok,
                                                          "--worker-token-file", wtok])
        w_http, _ = worker(c, "worker", address, [*serve, "--tls-ca", ca, "--token-file", tok,
                                                  "--worker-token-file", wtok])
        consume = ["consume", "--dispatcher", address, spec, "--print-keys"]
        expect_keys(c, "consume-tls-token", [*consume, "--tls-ca", ca, "--token-file", tok])
        # The same through the environment.
        expect_keys(c, "consume-env", consume,
                    env={"STOKER_TLS_CA": ca, "STOKER_TOKEN_FILE": tok})
        expect_refused(c, "consume-no-token", [*consume, "--tls-ca", ca],
                       "requires a token", "--token-file", "STOKER_TOKEN_FILE")
        expect_refused(c, "consume-wrong-token", [*consume, "--tls-ca", ca, "--token-file", bad],
                       "does not match", "--token-file")
        # A trainer's token does not make it a worker: the worker token is separate.
        expect_refused(c, "consume-worker-token", [*consume, "--tls-ca", ca, "--token-file", wtok],
                       "does not match")
        expect_refused(c, "consume-plaintext", consume, "serves TLS", "--tls-ca")
        expect_refused(c, "consume-other-ca",
                       [*consume, "--tls-ca", os.path.join(work, "other-ca.pem"), "--token-file",
                        tok], "TLS handshake", "--tls-ca")
        d_log = os.path.join(work, "dispatcher.out")
        wait_for(lambda: "refused GetOrCreateJob" in read(d_log),
                 "the dispatcher's log line about a refused consumer")

        # A worker with the client token instead of the worker token: refused, and it says so.
        _, w2_log = worker(c, "worker-wrong-token", address, [*serve, "--tls-ca", ca,
                                                             "--token-file", tok])
        wait_for(lambda: "refused this worker" in read(w2_log) and
                 "--worker-token-file" in read(w2_log), "the refused worker's error")
        wait_for(lambda: "refused WorkerHeartbeat" in read(d_log),
                 "the dispatcher's log line about a refused worker")
        # A worker without a token at all.
        _, w3_log = worker(c, "worker-no-token", address, [*serve, "--tls-ca", ca])
        wait_for(lambda: "requires a worker token" in read(w3_log), "the tokenless worker's error")
        # A worker dialling plaintext to the TLS dispatcher.
        _, w4_log = worker(c, "worker-plaintext", address, ["--token-file", tok,
                                                           "--worker-token-file", wtok])
        wait_for(lambda: "serves TLS and this side dials plaintext" in read(w4_log),
                 "the plaintext worker's error")
        print("refused workers: said so in their logs")

        # Mutual TLS: a client without a certificate is refused; with one it reads.
        m_address, m_http, _ = dispatcher(c, "dispatcher-mtls",
                                          [*serve, "--tls-client-ca", ca, "--token-file", tok])
        worker(c, "worker-mtls", m_address, [*serve, "--tls-client-ca", ca, "--tls-ca", ca,
                                             "--token-file", tok])
        m_consume = ["consume", "--dispatcher", m_address, spec, "--print-keys", "--tls-ca", ca,
                     "--token-file", tok]
        expect_refused(c, "consume-mtls-no-cert", m_consume, "TLS handshake", "--tls-client-ca",
                       "--tls-cert")
        expect_keys(c, "consume-mtls", [*m_consume, "--tls-cert", cert, "--tls-key", key])

        # A TLS client to a plaintext dispatcher.
        p_address, p_http, _ = dispatcher(c, "dispatcher-plaintext", [])
        expect_refused(c, "consume-tls-to-plaintext",
                       ["consume", "--dispatcher", p_address, spec, "--tls-ca", ca],
                       "serves plaintext gRPC")
        p_log = os.path.join(work, "dispatcher-plaintext.out")
        wait_for(lambda: "serving plaintext gRPC" in read(p_log), "the plaintext warning")
        if "serving plaintext gRPC" in read(d_log):
            fail("the TLS dispatcher warns that it serves plaintext")

        # Python's distribute(...) with tls_ca= and token_file=.
        if PYTHONPATH:
            code = (f"import stoker\n"
                    f"p = stoker.memory_range({N}).distribute(dispatcher={address!r}, "
                    f"tls_ca={ca!r}, token_file={tok!r})\n"
                    f"print(sum(1 for _ in p))\n"
                    f"try:\n"
                    f"    next(iter(stoker.memory_range(3).distribute(dispatcher={address!r}, "
                    f"tls_ca={ca!r})))\n"
                    f"except Exception as e:\n"
                    f"    print('refused:', e)\n")
            env = {**os.environ, "PYTHONPATH": PYTHONPATH}
            env.pop("STOKER_TOKEN_FILE", None)
            r = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                               timeout=60, env=env)
            lines = r.stdout.split("\n")
            if r.returncode != 0 or lines[0] != str(N) or "requires a token" not in r.stdout:
                fail(f"python distribute over TLS: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
            print(f"python distribute(tls_ca=, token_file=): {N} elements; without token: refused")

        # Nothing secret anywhere: pages, metrics, every process's output, --help.
        pages = []
        for port in (d_http, w_http, m_http, p_http):
            for path in ("/", "/metrics", "/healthz"):
                pages.append(f"http://127.0.0.1:{port}{path}\n" + http_get(port, path)[1])
        c.stop()
        texts = pages + [read(p) for p in c.outputs]
        for sub in ("dispatcher", "worker", "consume"):
            texts.append(subprocess.run([STOKER, sub, "--help"], capture_output=True,
                                        text=True).stdout)
        key_lines = [l for l in read(key).splitlines() if l and not l.startswith("-----")]
        secrets = [CLIENT_TOKEN, WORKER_TOKEN, "not-the-token", *key_lines[:3], key_lines[-1]]
        for text in texts:
            for s in secrets:
                if s in text:
                    fail(f"secret material found in output:\n{text[:2000]}")
        print(f"no token or key material in {len(texts)} outputs, pages and help texts")
    finally:
        c.stop()
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    print("security test: OK")


if __name__ == "__main__":
    main()
