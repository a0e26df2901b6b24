"""Shared plumbing for `make bench`: test servers, timing, server CPU, result tables.

Every suite runs stoker and its peers side by side, in one run, on the same data, and reports
medians of several runs and ratios (this machine is shared and noisy; single times mean little).
Pages untouched for about a minute are reclaimed here, so suites warm caches right before they
measure, or drop them on purpose for cold runs.
"""
import atexit
import os
import shutil
import statistics
import subprocess
import tempfile
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AWS = "/usr/bin/aws"  # Debian's AWS CLI; it predates AWS_ENDPOINT_URL, so pass --endpoint-url


def log(message):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(cmd, env=None, check=True, **kwargs):
    return subprocess.run(cmd, env=env, check=check, text=True, capture_output=True, **kwargs)


def process_cpu_seconds(marker):
    """User+system CPU seconds of every process whose command line contains `marker`, and of their
    children (nginx's and Swift's workers do not repeat the configuration path)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # fields[1] is the parent pid; [11] and [12] are user and system time in ticks.
        stats[pid] = (marker.encode() in cmdline, fields[1], int(fields[11]) + int(fields[12]))
    chosen = {pid for pid, (match, _, _) in stats.items() if match}
    chosen |= {pid for pid, (_, parent, _) in stats.items() if parent in chosen}
    return sum(stats[pid][2] for pid in chosen) / ticks


def drop_page_cache():
    """Drops the kernel page cache when allowed (root); returns whether it did."""
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Measurement:
    """Median wall time and server CPU over several runs of one command."""

    def __init__(self, name, seconds, server_cpu, nbytes):
        self.name = name
        self.seconds = seconds          # list of wall times
        self.server_cpu = server_cpu    # list of server CPU seconds, same runs
        self.nbytes = nbytes

    @property
    def median(self):
        return statistics.median(self.seconds)

    @property
    def mb_per_s(self):
        return self.nbytes / self.median / 1e6

    @property
    def cpu_median(self):
        return statistics.median(self.server_cpu) if self.server_cpu else float("nan")


def measure(name, action, nbytes, repeat, server_marker=None, before_each=None):
    """Runs `action()` `repeat` times (after `before_each()` if given); wall time of each run."""
    seconds, cpu = [], []
    for _ in range(repeat):
        if before_each:
            before_each()
        cpu_before = process_cpu_seconds(server_marker) if server_marker else 0.0
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
        if server_marker:
            cpu.append(process_cpu_seconds(server_marker) - cpu_before)
    m = Measurement(name, seconds, cpu, nbytes)
    log(f"{name}: median {m.median:.3f} s ({m.mb_per_s:.0f} MB/s) over {repeat} runs "
        f"{[round(s, 3) for s in seconds]}")
    return m


class Context:
    """Servers and folders shared by the suites of one `make bench` run."""

    def __init__(self, build_dir, repeat):
        self.build_dir = os.path.abspath(build_dir)
        self.stoker = os.path.join(self.build_dir, "stoker")
        self.repeat = repeat
        self.tmp = tempfile.mkdtemp(prefix="stoker-bench-")
        self.results_dir = os.path.join(SOURCE_DIR, "bench", "results")
        self._s3_dir = None
        self._http_dirs = []
        atexit.register(self.close)

    def s3(self):
        """Starts the Swift S3 test server once; returns the AWS_* environment for it."""
        if self._s3_dir is None:
            self._s3_dir = os.path.join(self.tmp, "s3")
            log("starting the Swift S3 test server")
            run([os.path.join(SOURCE_DIR, "scripts", "s3-test-server"), "start", self._s3_dir])
        out = run([os.path.join(SOURCE_DIR, "scripts", "s3-test-server"), "env", self._s3_dir]).stdout
        env = dict(os.environ)
        for line in out.splitlines():
            key, value = line.replace("export ", "", 1).split("=", 1)
            env[key] = value.strip("'\"")
        env.pop("AWS_CA_BUNDLE", None)
        return env

    @property
    def s3_marker(self):
        return self._s3_dir

    def aws(self, env, *args):
        return run([AWS, "--endpoint-url", env["AWS_ENDPOINT_URL"], *args], env=env)

    def http(self, root):
        """Starts nginx serving `root`; returns (base URL, marker for its CPU)."""
        d = os.path.join(self.tmp, f"http{len(self._http_dirs)}")
        run([os.path.join(SOURCE_DIR, "scripts", "http-test-server"), "start", d, root])
        self._http_dirs.append(d)
        url = run([os.path.join(SOURCE_DIR, "scripts", "http-test-server"), "url", d]).stdout.strip()
        return url.rstrip("/"), d

    def close(self):
        for d in self._http_dirs:
            run([os.path.join(SOURCE_DIR, "scripts", "http-test-server"), "stop", d], check=False)
        self._http_dirs = []
        if self._s3_dir:
            run([os.path.join(SOURCE_DIR, "scripts", "s3-test-server"), "stop", self._s3_dir], check=False)
            self._s3_dir = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write_result(self, name, text):
        os.makedirs(self.results_dir, exist_ok=True)
        path = os.path.join(self.results_dir, f"{name}.md")
        with open(path, "w") as f:
            f.write(text)
        log(f"wrote {os.path.relpath(path, SOURCE_DIR)}")


def make_sample_tree(root, samples, sample_bytes, classes):
    """root/classNN/IIIII.bin: `samples` files of `sample_bytes` random bytes in `classes` folders
    (sample i in class i % classes), the original files the local-read suites compare with."""
    for i in range(samples):
        folder = os.path.join(root, f"class{i % classes:02d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i:05d}.bin"), "wb") as f:
            f.write(os.urandom(sample_bytes))


def machine_line():
    cpus = os.cpu_count()
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 2**20
    return (f"Machine: {cpus} cores, {mem_gib:.0f} GiB; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
            "Server and client share these cores.")
