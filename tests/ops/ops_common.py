"""Helpers the operations tests (tests/ops/*_test.py) share: failing with a message, reading a
process's log file, waiting for a condition, reading a process's HTTP pages and metrics, and
network namespaces (scripts/netns-cluster) for tests of several hosts.
The tests run as scripts, so their own folder is on sys.path and `import ops_common` finds this."""
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def read(path):
    """The text of a file, or "" while it does not exist."""
    return open(path).read() if os.path.exists(path) else ""


def wait_for(predicate, what, timeout=20):
    """predicate()'s first true value, polled every 50 ms; fails naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    fail(f"timed out waiting for {what}")


def http_get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path (an HTTP error status is returned too)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(port, series):
    """The value of one series (name and labels, as written) on a process's /metrics, or None."""
    for line in http_get(port, "/metrics")[1].splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def load_netns_cluster(source_dir):
    """scripts/netns-cluster as a module (its Cluster class makes the namespaces)."""
    path = os.path.join(source_dir, "scripts", "netns-cluster")
    loader = importlib.machinery.SourceFileLoader("netns_cluster", path)
    spec = importlib.util.spec_from_loader("netns_cluster", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def can_create_namespaces():
    """None if this process can create network namespaces, else why not."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_NET_ADMIN)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = f"stoker-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe])
    return None


def stop_and_keep_logs(procs, work, out_dir):
    """Kills the processes still running, copies their logs (*.out, *.err in `work`) to
    `out_dir` and removes `work`."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for name in os.listdir(work):
        if name.endswith(".out") or name.endswith(".err"):
            shutil.copy(os.path.join(work, name), out_dir)
    shutil.rmtree(work, ignore_errors=True)
