"""The fault soak: the service under chaos, checked from the outside.

A real Swift S3 server holds a converted dataset of small JPEGs; the workers read it through
`stoker-fault-proxy`, which answers some requests with 503 SlowDown, resets or truncates some
bodies, and stalls some for 2 s. For the whole run, round after round, four consumer processes
(Python, `Pipeline.distribute`) read two jobs of two epochs each: two consumers share one named
job (each element to one of them), two are the ranks of a coordinated job. Meanwhile a chaos loop
kill -9s a random worker (a new one is started in its place) or kill -9s and restarts the
dispatcher on its port and journal.

Checked for every round and epoch: the keys the consumers of a job received are every key of the
dataset exactly once, each sample's pixels equal the in-process pipeline's, the two ranks got the
same number of batches, and every consumer exited 0 within the round's time limit. Every process's
resident memory is sampled twice a second and must stay under its budget.

  soak.py --stoker BIN --fault-proxy BIN --make-test-images BIN --python-dir DIR
          --source-dir DIR --minutes M [--report FILE] [--out DIR]

Exit status 0 when every check held; 1 (with the reason, and the tail of the logs) otherwise.
`make soak` runs it for 20 minutes and writes bench/results/soak.md; `make test` runs 2 minutes.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PYTHON = "/usr/bin/python3"
BATCH = 8
CLASSES, PER_CLASS = 8, 80  # 640 samples: 40 complete rounds of 2 ranks x 8
EPOCHS = 2
WORKERS = 3
ROUND_TIMEOUT_S = 240
STEP_S = 0.02  # each consumer's time per batch, as a trainer's step
# Resident-memory budgets (MiB) per role; a process above its budget fails the soak.
BUDGET_MB = {"dispatcher": 100, "worker": 400, "consumer": 400, "proxy": 50}
FAULTS = {"--error-rate": "0.02", "--reset-rate": "0.01", "--truncate-rate": "0.01",
          "--stall-rate": "0.003", "--stall-ms": "2000"}
SPEC = {"source": {"dataset": "s3://soak/ds/"},
        "ops": [{"op": "shuffle"}, {"op": "decode_image", "field": "jpg"},
                {"op": "batch", "size": BATCH}]}


def log(message):
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Failure(Exception):
    pass


# --- the consumer process -------------------------------------------------------------------------

def consume(args):
    """One consumer of one job: every epoch's keys and the SHA-1 of each sample's pixels, as JSON
    lines {"epoch": e, "batch": [[key, sha1], ...]} on stdout."""
    sys.path.insert(0, args.python_dir)
    import stoker
    pipe = stoker.Pipeline.from_spec(SPEC)
    kwargs = {"job_name": args.job_name, "num_epochs": EPOCHS}
    if args.ranks:
        kwargs.update(num_consumers=args.ranks, consumer_index=args.rank)
    served = pipe.distribute(args.dispatcher, **kwargs)
    # All four consumers of a round start reading together: a shared job whose first consumer
    # finished it before the second asked would (as documented) give the second a new job.
    open(os.path.join(args.barrier, f"ready-{os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(args.barrier, "go")):
        time.sleep(0.01)
    for epoch in range(EPOCHS):
        for batch in served:
            time.sleep(STEP_S)  # the trainer's step
            images = batch["jpg"]
            rows = [[k, hashlib.sha1(images[i].tobytes()).hexdigest()]
                    for i, k in enumerate(batch["__keys__"])]
            print(json.dumps({"epoch": epoch, "batch": rows}), flush=True)
    served.close()


def reference(args, env):
    """{key: sha1 of its pixels} from the pipeline run in-process on the unfaulted server."""
    code = (f"import sys, json, hashlib; sys.path.insert(0, {args.python_dir!r}); import stoker\n"
            f"p = stoker.Pipeline.from_spec(json.loads({json.dumps(json.dumps(SPEC))}))\n"
            "print(json.dumps({k: hashlib.sha1(b['jpg'][i].tobytes()).hexdigest()"
            " for b in p for i, k in enumerate(b['__keys__'])}))\n")
    r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise Failure(f"the in-process reference run failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


# --- the cluster ----------------------------------------------------------------------------------

class Soak:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.procs = {}  # name -> Popen, every live process this soak started
        self.roles = {}  # name -> role (BUDGET_MB key)
        self.lock = threading.Lock()
        self.max_rss = {}  # role -> (MiB, name)
        self.events = []  # (seconds since start, what)
        self.counts = {"worker kills": 0, "dispatcher restarts": 0, "rounds": 0,
                       "epochs checked": 0, "elements checked": 0}
        self.start_time = time.monotonic()
        self.stop = threading.Event()
        self.worker_seq = 0
        self.errors = []

    def event(self, what):
        with self.lock:
            self.events.append((time.monotonic() - self.start_time, what))
        log(what)

    def spawn(self, name, role, argv, env, stdout=None):
        logf = open(os.path.join(self.out, f"{name}.log"), "ab")
        p = subprocess.Popen(argv, stdout=stdout if stdout is not None else subprocess.PIPE,
                             stderr=logf, env=env)
        with self.lock:
            self.procs[name] = p
            self.roles[name] = role
        return p

    def forget(self, name):
        with self.lock:
            self.procs.pop(name, None)

    def kill(self, name):
        with self.lock:
            p = self.procs.pop(name, None)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    # S3 server, dataset, proxy.
    def start_storage(self):
        script = os.path.join(self.args.source_dir, "scripts", "s3-test-server")
        self.s3_dir = os.path.join(self.out, "s3")
        subprocess.run([script, "start", self.s3_dir], check=True, stdout=subprocess.DEVNULL,
                       timeout=180)
        env_lines = subprocess.run([script, "env", self.s3_dir], check=True, capture_output=True,
                                   text=True).stdout
        s3 = {m.group(1): m.group(2).strip("'\"")
              for m in re.finditer(r"export (\w+)=(\S+)", env_lines)}
        self.direct_env = dict(os.environ, **s3)
        endpoint = s3["AWS_ENDPOINT_URL"]
        subprocess.run(["/usr/bin/aws", "--endpoint-url", endpoint, "s3", "mb", "s3://soak"],
                       env=self.direct_env, check=True, stdout=subprocess.DEVNULL)
        images = os.path.join(self.out, "images")
        subprocess.run([self.args.make_test_images, images, "--classes", str(CLASSES),
                        "--per-class", str(PER_CLASS), "--width", "64", "--height", "48"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([self.args.stoker, "convert", images, "s3://soak/ds/", "--shard-size",
                        "64KiB"], env=self.direct_env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        upstream = re.sub(r"^https?://", "", endpoint).rstrip("/")
        argv = [self.args.fault_proxy, "--upstream", upstream, "--port", "0", "--seed", "7"]
        for flag, value in FAULTS.items():
            argv += [flag, value]
        proxy = self.spawn("proxy", "proxy", argv, os.environ)
        line = proxy.stdout.readline().decode()
        m = re.search(r"listening on (\S+)", line)
        if not m:
            raise Failure(f"stoker-fault-proxy did not start: {line!r}")
        self.faulty_env = dict(self.direct_env, AWS_ENDPOINT_URL=m.group(1))
        self.faulty_env["STOKER_LOG"] = "info"

    def start_dispatcher(self, port=0):
        p = self.spawn("dispatcher", "dispatcher",
                       [self.args.stoker, "dispatcher", "--port", str(port), "--work-dir",
                        os.path.join(self.out, "journal"), "--worker-timeout-ms", "2000",
                        "--client-timeout-ms", "20000"], self.faulty_env)
        line = p.stdout.readline().decode()
        m = re.search(r"serving on port (\d+)", line)
        if not m:
            raise Failure(f"the dispatcher did not start: {line!r} (rc {p.poll()})")
        self.port = int(m.group(1))
        self.address = f"127.0.0.1:{self.port}"

    def start_worker(self):
        self.worker_seq += 1
        name = f"worker{self.worker_seq}"
        p = self.spawn(name, "worker",
                       [self.args.stoker, "worker", "--dispatcher", self.address,
                        "--heartbeat-ms", "200"], self.faulty_env)
        line = p.stdout.readline().decode()
        if "serving on" not in line:
            raise Failure(f"{name} did not start: {line!r} (rc {p.poll()})")

    def workers(self):
        with self.lock:
            return [n for n, r in self.roles.items() if r == "worker" and n in self.procs]

    # The chaos loop and the memory sampler run on their own threads until self.stop.
    def chaos(self):
        rng = random.Random(self.args.seed)
        while not self.stop.wait(rng.uniform(2.0, 5.0)):
            try:
                if rng.random() < 0.75:
                    victim = rng.choice(self.workers())
                    self.kill(victim)
                    self.counts["worker kills"] += 1
                    self.event(f"kill -9 {victim}")
                    self.start_worker()
                else:
                    self.kill("dispatcher")
                    self.counts["dispatcher restarts"] += 1
                    self.event("kill -9 the dispatcher; restarting it")
                    time.sleep(rng.uniform(0.0, 1.0))
                    self.start_dispatcher(self.port)
            except Exception as e:  # reported at the end; the rounds will fail too
                self.errors.append(f"chaos: {e}")
                return

    def sample_memory(self):
        """Every 0.5 s: each process's resident memory, and servers that exited by themselves
        (a crash: the chaos loop forgets a process before it kills it)."""
        while not self.stop.wait(0.5):
            with self.lock:
                live = [(n, self.roles[n], p.pid) for n, p in self.procs.items()
                        if p.poll() is None]
                crashed = [(n, p.returncode) for n, p in self.procs.items()
                           if self.roles[n] != "consumer" and p.poll() is not None]
            for name, rc in crashed:
                tail = open(os.path.join(self.out, f"{name}.log"), errors="replace").read()[-1500:]
                self.errors.append(f"{name} exited by itself (status {rc}): {tail}")
                self.forget(name)
            for name, role, pid in live:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
                except (OSError, StopIteration):
                    continue
                mb = rss / 1024
                with self.lock:
                    if mb > self.max_rss.get(role, (0, ""))[0]:
                        self.max_rss[role] = (mb, name)

    # One round: a shared job and a coordinated job, two consumers each.
    def run_round(self, index, expected):
        consumers = []
        barrier = os.path.join(self.out, f"barrier{index}")
        os.makedirs(barrier)
        for job, ranks in (("shared", 0), ("coord", 2)):
            for c in range(2):
                name = f"round{index}-{job}{c}"
                argv = [PYTHON, os.path.abspath(__file__), "--consume", "--python-dir",
                        self.args.python_dir, "--dispatcher", self.address, "--job-name",
                        f"soak-{job}-{index}", "--barrier", barrier]
                if ranks:
                    argv += ["--ranks", str(ranks), "--rank", str(c)]
                out = open(os.path.join(self.out, f"{name}.jsonl"), "wb")
                # Pipeline.from_spec opens the manifest, so consumers get credentials too (for
                # the server without faults: the faults are between the workers and S3). A
                # consumer may open its job while the chaos loop restarts the dispatcher: it
                # waits for it (a refused connection fails at once otherwise).
                env = dict(self.direct_env, STOKER_WAIT_FOR_DISPATCHER="60")
                consumers.append((job, c, name, out.name,
                                  self.spawn(name, "consumer", argv, env, stdout=out)))
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while len(os.listdir(barrier)) < len(consumers):
            if time.monotonic() > deadline or any(c[4].poll() is not None for c in consumers):
                break  # the waits below report which consumer failed
            time.sleep(0.01)
        open(os.path.join(barrier, "go"), "w").close()
        for job, c, name, path, p in consumers:
            try:
                rc = p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise Failure(f"round {index}: {name} did not finish within {ROUND_TIMEOUT_S} s")
            self.forget(name)
            if rc != 0:
                raise Failure(f"round {index}: {name} exited {rc}: "
                              f"{open(os.path.join(self.out, name + '.log')).read()[-2000:]}")
        for job in ("shared", "coord"):
            per_epoch = [dict() for _ in range(EPOCHS)]  # key -> [(consumer, sha1)]
            batches = {}
            for j, c, name, path, _ in consumers:
                if j != job:
                    continue
                for line in open(path):
                    record = json.loads(line)
                    batches[(c, record["epoch"])] = batches.get((c, record["epoch"]), 0) + 1
                    for key, digest in record["batch"]:
                        per_epoch[record["epoch"]].setdefault(key, []).append((name, digest))
            for epoch, seen in enumerate(per_epoch):
                where = f"round {index}, {job} job, epoch {epoch}"
                missing = sorted(set(expected) - set(seen))
                twice = sorted(k for k, v in seen.items() if len(v) > 1)
                unknown = sorted(set(seen) - set(expected))
                if missing or twice or unknown:
                    raise Failure(f"{where}: {len(missing)} keys missing (e.g. {missing[:3]}), "
                                  f"{len(twice)} delivered more than once (e.g. "
                                  f"{[(k, seen[k]) for k in twice[:2]]}), {len(unknown)} unknown")
                wrong = [k for k, v in seen.items() if v[0][1] != expected[k]]
                if wrong:
                    raise Failure(f"{where}: {len(wrong)} samples with other pixels than the "
                                  f"in-process pipeline's, e.g. {wrong[:3]}")
                if job == "coord" and batches.get((0, epoch)) != batches.get((1, epoch)):
                    raise Failure(f"{where}: the ranks got {batches.get((0, epoch))} and "
                                  f"{batches.get((1, epoch))} batches")
                self.counts["epochs checked"] += 1
                self.counts["elements checked"] += len(seen)
        self.counts["rounds"] += 1

    def run(self):
        self.start_storage()
        expected = reference(self.args, self.direct_env)
        if len(expected) != CLASSES * PER_CLASS:
            raise Failure(f"the reference run read {len(expected)} samples, not "
                          f"{CLASSES * PER_CLASS}")
        self.start_dispatcher()
        for _ in range(WORKERS):
            self.start_worker()
        self.event(f"dispatcher on {self.address}, {WORKERS} workers; soaking for "
                   f"{self.args.minutes} min")
        self.start_time = time.monotonic()  # the soak proper: setup and reference not counted
        threads = [threading.Thread(target=self.chaos, daemon=True),
                   threading.Thread(target=self.sample_memory, daemon=True)]
        for t in threads:
            t.start()
        end = self.start_time + self.args.minutes * 60
        index = 0
        while time.monotonic() < end and not self.errors:
            self.run_round(index, expected)
            log(f"round {index} passed ({self.counts})")
            index += 1
        self.stop.set()
        for t in threads:
            t.join()
        if self.errors:
            raise Failure("; ".join(self.errors))
        for role, (mb, name) in self.max_rss.items():
            if mb > BUDGET_MB[role]:
                raise Failure(f"{name} reached {mb:.0f} MiB of resident memory "
                              f"(budget for a {role}: {BUDGET_MB[role]} MiB)")

    def shutdown(self):
        self.stop.set()
        proxy = self.procs.get("proxy")
        if proxy is not None and proxy.poll() is None:
            proxy.send_signal(signal.SIGTERM)  # it prints how many faults it injected
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        with self.lock:
            names = list(self.procs)
        for name in names:
            self.kill(name)
        if hasattr(self, "s3_dir"):
            script = os.path.join(self.args.source_dir, "scripts", "s3-test-server")
            subprocess.run([script, "stop", self.s3_dir], timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def proxy_counts(self):
        """The fault proxy's own count of injected faults (printed when it stops)."""
        text = open(os.path.join(self.out, "proxy.log"), errors="replace").read()
        m = re.findall(r"stoker-fault-proxy: .*", text)
        return m[-1] if m else "(not reported)"

    def report(self, passed, reason):
        elapsed = time.monotonic() - self.start_time
        load = open("/proc/loadavg").read().split()[:3]
        lines = [
            "# Fault soak",
            "",
            f"`tests/soak/soak.py` ({'`make soak`' if self.args.minutes >= 10 else 'short run'}),"
            f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: **{'passed' if passed else 'FAILED'}**"
            + ("" if passed else f": {reason}"),
            "",
            f"- Duration: {elapsed / 60:.1f} min; load average at the end {' '.join(load)} "
            "(2 cores, shared with other builds).",
            f"- Data: {CLASSES * PER_CLASS} JPEGs (64x48) converted to a Swift S3 bucket; pipeline "
            f"shuffle -> decode_image -> batch {BATCH}; every job runs {EPOCHS} epochs.",
            f"- Each round: 2 consumers of one shared job + 2 ranks of one coordinated job "
            "(Python `distribute`, separate processes).",
            f"- Faults between the workers and S3 (stoker-fault-proxy): "
            + ", ".join(f"{k[2:]} {v}" for k, v in FAULTS.items()) + ".",
            f"- Injected: {self.proxy_counts()}.",
            "",
            "| what | count |",
            "| --- | --- |",
        ] + [f"| {k} | {v} |" for k, v in self.counts.items()] + [
            "",
            "Peak resident memory per role (budget):",
            "",
            "| role | peak MiB | process | budget MiB |",
            "| --- | --- | --- | --- |",
        ] + [f"| {role} | {mb:.0f} | {name} | {BUDGET_MB[role]} |"
             for role, (mb, name) in sorted(self.max_rss.items())] + [
            "",
            "Checked for every round and epoch: each job's consumers together received every key "
            "exactly once, with the in-process pipeline's pixels; the two ranks of the coordinated "
            "job got the same number of batches; every consumer exited 0.",
            ""]
        return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--consume", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dispatcher")
    ap.add_argument("--job-name")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--barrier")
    ap.add_argument("--stoker")
    ap.add_argument("--fault-proxy")
    ap.add_argument("--make-test-images")
    ap.add_argument("--python-dir", required=True)
    ap.add_argument("--source-dir")
    ap.add_argument("--minutes", type=float, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report", help="write the results (markdown) here")
    ap.add_argument("--out", help="logs and outputs (default: a temporary folder, kept on failure)")
    args = ap.parse_args()
    if args.consume:
        return consume(args)
    keep = args.out is not None
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix="stoker-soak-")
    elif os.path.exists(args.out):
        shutil.rmtree(args.out)
    soak = Soak(args)
    passed, reason = False, ""
    try:
        soak.run()
        passed = True
    except Failure as e:
        reason = str(e)
    finally:
        soak.shutdown()
    text = soak.report(passed, reason)
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text)
    if not passed:
        log(f"FAILED: {reason}; logs in {args.out}")
        for name in ("dispatcher", "proxy"):
            path = os.path.join(args.out, f"{name}.log")
            if os.path.exists(path):
                print(f"--- {name}.log (tail) ---\n" + open(path, errors="replace").read()[-3000:])
        return 1
    if not keep:
        shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
