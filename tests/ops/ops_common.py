"""Helpers the operations tests (tests/ops/*_test.py) share: failing with a message, reading a
process's log file, waiting for a condition, and reading a process's HTTP pages and metrics.
The tests run as scripts, so their own folder is on sys.path and `import ops_common` finds this."""
import os
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
