"""A stoker service of real processes for the Python tests: `stoker dispatcher` and `stoker worker`
started as documented (docs/protocol.md), on free loopback ports, with their logs in a folder."""
import os
import re
import signal
import subprocess
import time


class Cluster:
    """A dispatcher and workers. Stops every process it started (kill -9 if they do not stop)."""

    def __init__(self, stoker_bin, workdir, client_timeout_ms=3000, worker_timeout_ms=2000,
                 env=None, port=0):
        self.bin = stoker_bin
        self.dir = str(workdir)
        # Job and consumer events are logged at info (the default level is warn).
        self.env = dict(env if env is not None else os.environ, STOKER_LOG="info")
        os.makedirs(self.dir, exist_ok=True)
        self.procs = []
        self.dispatcher_log = os.path.join(self.dir, "dispatcher.log")
        self.dispatcher = self._start(
            [stoker_bin, "dispatcher", "--port", str(port), "--http-port", "0", "--work-dir",
             os.path.join(self.dir, "journal"), "--client-timeout-ms", str(client_timeout_ms),
             "--worker-timeout-ms", str(worker_timeout_ms)], self.dispatcher_log)
        line = self._first_line(self.dispatcher)   # "dispatcher: serving on port N, ..."
        self.port = int(re.search(r"serving on port (\d+)", line).group(1))
        http = re.search(r"/healthz on port (\d+)", line)  # also /metrics and the status page
        self.http_port = int(http.group(1)) if http else None
        self.address = f"127.0.0.1:{self.port}"
        self.workers = []

    def _start(self, argv, log_path):
        log = open(log_path, "ab")
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=self.env)
        self.procs.append(p)
        return p

    @staticmethod
    def _first_line(p):
        line = p.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"{p.args[:2]} ended before serving (rc {p.wait()})")
        return line

    def add_worker(self, *extra):
        i = len(self.workers)
        w = self._start([self.bin, "worker", "--dispatcher", self.address, "--http-port", "0",
                         "--heartbeat-ms", "200", *extra],
                        os.path.join(self.dir, f"worker{i}.log"))
        line = self._first_line(w)                 # "worker: serving on HOST:PORT, ..."
        http = re.search(r"/healthz on port (\d+)", line)  # also /metrics
        w.http_port = int(http.group(1)) if http else None
        self.workers.append(w)
        return w

    def restart_dispatcher(self):
        """kill -9 the dispatcher, then start it again on its port with its journal."""
        argv = list(self.dispatcher.args)
        argv[argv.index("--port") + 1] = str(self.port)
        self.dispatcher.kill()
        self.dispatcher.wait()
        self.dispatcher = self._start(argv, self.dispatcher_log)
        self._first_line(self.dispatcher)          # "dispatcher: serving on port N, ..."

    def log(self):
        with open(self.dispatcher_log, errors="replace") as f:
            return f.read()

    def wait_for_workers(self, n, timeout=20):
        """Waits until worker n has joined (the dispatcher's log says so); fails the test if not."""
        assert self.wait_for_log(rf"worker {n} (joined )?at ", timeout), self.log()

    def wait_for_log(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.log()):
                return True
            time.sleep(0.1)  # polling a log file
        return False

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slow_image_spec(url):
    """Shuffled decode with random crops and flips (the bytes depend on seed, epoch and sample),
    made slow on purpose (an upscale) so that a worker killed early in a job still had work to
    lose."""
    return {
        "seed": 11,
        "source": {"dataset": url},
        "ops": [
            {"op": "shuffle", "seed": 5},
            {"op": "decode_image", "field": "jpg"},
            {"op": "resize", "field": "jpg", "size": [384, 384]},
            {"op": "random_resized_crop", "field": "jpg", "size": [24, 24]},
            {"op": "flip", "field": "jpg", "p": 0.5},
            {"op": "batch", "size": 4},
        ],
    }
