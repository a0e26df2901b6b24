#!/usr/bin/python3
"""stoker's container image, run with podman (docs/deploy.md, "Containers with podman").

1. The image: deploy/build-image.sh --prebuilt STOKER packs this build's binary into the runtime
   stage of deploy/Containerfile (the base image localhost/debian:12 is made from Debian packages
   when podman's storage lacks it). In it, `stoker --version` names the binary's commit, the user is
   uid 10001 and there is no compiler.
2. On a podman network: a dispatcher container with its journal on a volume and 3 worker
   containers, which must register their container address. Two trainers, `stoker consume
   --epochs 2` on the host and the same in a container, and a Python trainer (Pipeline.distribute,
   tests/deploy/container_trainer.py) in a container of the image with Python (build-image.sh
   --prebuilt STOKER --python), each get every key exactly once per epoch while a worker container that holds a split is killed (kill -9) mid-epoch and, later, the
   dispatcher container is killed, removed and started again as a new container on the journal
   volume (same address). /metrics and the status page are read over the network.
3. `podman kube play` of deploy/kubernetes/stoker.yaml, with what podman does not support changed
   (docs/deploy.md lists it): the dispatcher and 2 workers start, the workers register, a host
   trainer reads every key once; `podman kube down`.

Skips (with podman's own message) only where podman is missing or cannot run a container, or
when not root (rootless podman's networks are not reachable from the host).
Everything it makes is named stoker-ct-PID-*; a later run removes what a killed run left.

Usage: container_test.py STOKER MAKE_TEST_IMAGES SOURCE_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_common import fail, read, wait_for  # noqa: E402

STOKER, MAKE_IMAGES, SOURCE_DIR, OUT_DIR = sys.argv[1:5]
PREFIX = f"stoker-ct-{os.getpid()}"
IMAGE = f"localhost/stoker:ctest-{os.getpid()}"
PY_IMAGE = f"localhost/stoker:ctest-py-{os.getpid()}"  # with python3 and the package `stoker`
BASE = "localhost/debian:12"
# The trainers' time per element: 120 elements make an epoch of about 12 s, time enough to kill
# and replace containers (each podman command takes about a second on a loaded machine) mid-epoch.
STEP_MS = "100"
T0 = time.time()


def step(what):
    print(f"[{time.time() - T0:6.1f} s] {what}", flush=True)


def podman(*args, check=True, timeout=300):
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        fail(f"podman {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip()


def http(url, timeout=2):
    """(status, body) of GET url; (0, why) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (OSError, ValueError) as e:
        return 0, str(e)


def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def metric_sum(text, prefix):
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_leftovers():
    """Containers, pods, networks and volumes of earlier runs whose process is gone."""
    def stale(name):
        m = re.match(r"stoker-ct-(\d+)-", name)
        return m and not os.path.exists(f"/proc/{m.group(1)}")
    for name in podman("pod", "ps", "--format", "{{.Name}}", check=False).split():
        if stale(name):
            podman("pod", "rm", "-f", name, check=False)
    for name in podman("ps", "-a", "--format", "{{.Names}}", check=False).split():
        if stale(name):
            podman("rm", "-f", name, check=False)
    for name in podman("network", "ls", "--format", "{{.Name}}", check=False).split():
        if stale(name):
            podman("network", "rm", "-f", name, check=False)
    for name in podman("volume", "ls", "--format", "{{.Name}}", check=False).split():
        if stale(name):
            podman("volume", "rm", "-f", name, check=False)
    for name in podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).split():
        m = re.match(r"localhost/stoker:ctest-(?:py-)?(\d+)$", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            podman("rmi", name, check=False)


def why_podman_cannot_run():
    """None if podman runs a container of the base image here (with its own settings, else with
    deploy/podman/containers.conf's, which it then keeps using, as build-image.sh does), else
    podman's messages."""
    def attempt():
        r = subprocess.run(["podman", "run", "--rm", "--network", "none", BASE, "true"],
                           capture_output=True, text=True, timeout=120)
        return None if r.returncode == 0 else r.stderr.strip()
    first = attempt()
    if first is None:
        return None
    if "CONTAINERS_CONF" in os.environ:
        return f"`podman run {BASE} true` failed (CONTAINERS_CONF={os.environ['CONTAINERS_CONF']}): {first}"
    os.environ["CONTAINERS_CONF"] = os.path.join(SOURCE_DIR, "deploy", "podman", "containers.conf")
    second = attempt()
    if second is None:
        print(f"podman's defaults cannot run a container here ({first}); using "
              f"CONTAINERS_CONF={os.environ['CONTAINERS_CONF']}")
        return None
    return (f"`podman run {BASE} true` failed: {first}; with "
            f"CONTAINERS_CONF={os.environ['CONTAINERS_CONF']}: {second}")


class Containers:
    """What the test made, removed at the end (also on SIGTERM from ctest's timeout)."""

    def __init__(self):
        self.containers, self.networks, self.volumes, self.kube = [], [], [], []
        self.procs = []

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for name in self.containers:  # their logs, kept in OUT_DIR
            open(os.path.join(OUT_DIR, f"{name[len(PREFIX) + 1:]}.log"), "w").write(logs(name))
        for path in self.kube:
            podman("kube", "down", path, check=False)
        for name in podman("pod", "ps", "--format", "{{.Name}}", check=False).split():
            if name.startswith(PREFIX + "-"):  # what a failed `kube play` left
                podman("pod", "rm", "-f", name, check=False)
        for name in self.containers:
            podman("rm", "-f", "-t", "0", name, check=False)
        for name in self.networks:
            podman("network", "rm", "-f", name, check=False)
        for name in self.volumes:
            podman("volume", "rm", "-f", name, check=False)
        podman("rmi", IMAGE, check=False)
        podman("rmi", PY_IMAGE, check=False)


def container_ip(name, network):
    return podman("inspect", "-f", "{{(index .NetworkSettings.Networks \"" + network +
                  "\").IPAddress}}", name)


def logs(name):
    r = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
    return r.stdout + r.stderr


def wait_healthy(ip, port, what, timeout=60):
    wait_for(lambda: http(f"http://{ip}:{port}/healthz")[0] == 200, f"{what}'s /healthz",
             timeout=timeout)


def check_epochs(keys, expected, epochs, who):
    n = len(expected)
    if len(keys) != epochs * n:
        fail(f"{who} received {len(keys)} keys, expected {epochs} epochs of {n}")
    for e in range(epochs):
        got = keys[e * n:(e + 1) * n]
        if sorted(got) != sorted(expected):
            missing = set(expected) - set(got)
            dup = len(got) - len(set(got))
            fail(f"{who}, epoch {e}: not every key exactly once ({len(missing)} missing, e.g. "
                 f"{sorted(missing)[:3]}; {dup} duplicates)")


def build_image(work):
    base_exists = subprocess.run(["podman", "image", "exists", BASE]).returncode == 0
    if base_exists:
        why = why_podman_cannot_run()
        if why:
            print(f"SKIP: podman cannot run containers here: {why}")
            return False
    step("building the image (deploy/build-image.sh --prebuilt)")
    r = subprocess.run([os.path.join(SOURCE_DIR, "deploy", "build-image.sh"), "--prebuilt", STOKER,
                        "--tag", IMAGE], capture_output=True, text=True, timeout=1200)
    open(os.path.join(OUT_DIR, "build-image.log"), "w").write(r.stdout + r.stderr)
    if r.returncode != 0:
        if not base_exists and subprocess.run(["podman", "image", "exists", BASE]).returncode == 0:
            why = why_podman_cannot_run()
            if why:
                print(f"SKIP: podman cannot run containers here: {why}")
                return False
        fail(f"deploy/build-image.sh failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    print(r.stdout.strip().splitlines()[-1])
    if not base_exists:
        why = why_podman_cannot_run()  # it ran in build-image.sh: picks the same settings
        if why:
            fail(why)
    host_version = subprocess.run([STOKER, "--version"], capture_output=True, text=True,
                                  check=True).stdout.strip()
    image_version = podman("run", "--rm", IMAGE, "--version")
    if image_version != host_version or "commit unknown" in image_version:
        fail(f"`stoker --version` in the image says {image_version!r}, the binary {host_version!r}")
    uid = podman("run", "--rm", "--entrypoint", "id", IMAGE, "-u")
    if uid != "10001":
        fail(f"the image runs as uid {uid}, expected 10001")
    tools = podman("run", "--rm", "--entrypoint", "sh", IMAGE, "-c",
                   "for t in gcc g++ cc c++ cmake ninja apt-get; do command -v $t; done || true")
    if any(t in tools for t in ("gcc", "g++", "cmake", "ninja")):
        fail(f"the runtime image holds build tools: {tools}")
    revision = podman("image", "inspect", "-f",
                      "{{index .Labels \"org.opencontainers.image.revision\"}}", IMAGE)
    if revision not in host_version:
        fail(f"the image's revision label {revision!r} is not the binary's commit")
    step(f"image {IMAGE}: {image_version}, uid 10001, no compiler")

    # The image with Python: the same binary, Debian's python3 and the package this build
    # assembled next to it (build/python/stoker).
    started = time.time()
    r = subprocess.run([os.path.join(SOURCE_DIR, "deploy", "build-image.sh"), "--prebuilt", STOKER,
                        "--python", "--tag", PY_IMAGE], capture_output=True, text=True,
                       timeout=1200)
    open(os.path.join(OUT_DIR, "build-image-python.log"), "w").write(r.stdout + r.stderr)
    if r.returncode != 0:
        fail(f"deploy/build-image.sh --python failed ({r.returncode}):\n"
             f"{(r.stdout + r.stderr)[-3000:]}")
    commit = re.search(r"\(commit (\S+)\)", host_version).group(1)
    in_python = podman("run", "--rm", PY_IMAGE)  # its CMD: the package's version and commit
    if in_python.split() != ["stoker", host_version.split()[1], commit]:
        fail(f"`import stoker` in {PY_IMAGE} says {in_python!r}; the binary is {host_version!r}")
    uid = podman("run", "--rm", PY_IMAGE, "-c", "import os; print(os.getuid())")
    if uid != "10001":
        fail(f"{PY_IMAGE} runs as uid {uid}, expected 10001")
    size = int(podman("image", "inspect", "--format", "{{.Size}}", PY_IMAGE))
    step(f"image {PY_IMAGE} in {time.time() - started:.0f} s: {in_python} in Python, uid 10001, "
         f"{size / 1e6:.0f} MB")
    return True


def make_dataset(work):
    images = os.path.join(work, "images")
    subprocess.run([MAKE_IMAGES, images, "--classes", "3", "--per-class", "40", "--width", "96",
                    "--height", "64"], check=True, stdout=subprocess.DEVNULL)
    shards = os.path.join(work, "shards")
    # Small shards: many splits, so that every worker holds some.
    subprocess.run([STOKER, "convert", images, shards, "--shard-size", "16384"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.chmod(work, 0o755)  # the containers' user (uid 10001) reads the shards through a mount
    local = os.path.join(work, "local.json")
    with open(local, "w") as f:
        json.dump({"source": {"dataset": shards}}, f)
    expected = subprocess.run([STOKER, "run", local, "--print-keys"], check=True,
                              capture_output=True, text=True).stdout.split()
    if len(expected) != 120 or len(set(expected)) != 120:
        fail(f"the local run read {len(expected)} keys ({len(set(expected))} distinct)")
    # The spec the trainers send: the workers see the shards at /data.
    job = os.path.join(work, "job")
    os.makedirs(job)
    with open(os.path.join(job, "spec.json"), "w") as f:
        json.dump({"source": {"dataset": "/data"}}, f)
    # The Python trainer's script, beside the spec (the container mounts the folder at /job).
    shutil.copy(os.path.join(SOURCE_DIR, "tests", "deploy", "container_trainer.py"), job)
    os.chmod(job, 0o755)
    for name in ("spec.json", "container_trainer.py"):
        os.chmod(os.path.join(job, name), 0o644)
    return shards, job, expected


def run_cluster(made, work, shards, job, expected):
    net = f"{PREFIX}-net"
    podman("network", "create", net)
    made.networks.append(net)
    vol = f"{PREFIX}-journal"
    podman("volume", "create", vol)
    made.volumes.append(vol)
    disp = f"{PREFIX}-dispatcher"
    disp_argv = ["dispatcher", "--port", "5000", "--http-port", "8080",
                 "--work-dir", "/var/lib/stoker/journal", "--worker-timeout-ms", "1500"]

    def start_dispatcher(ip=None, mac=None):
        started = time.time()
        made.containers.append(disp)
        # A replacement keeps the address and the MAC address: the neighbours' ARP entries of the
        # old container stay right (with a new MAC they would point nowhere until they expire).
        same = ["--ip", ip, "--mac-address", mac] if ip else []
        podman("run", "-d", "--name", disp, "--network", net, *same,
               "-v", f"{vol}:/var/lib/stoker/journal:U", IMAGE, *disp_argv)
        address = container_ip(disp, net)
        wait_healthy(address, 8080, "the dispatcher container")
        return address, time.time() - started

    disp_ip, start_s = start_dispatcher()
    step(f"dispatcher container at {disp_ip}: /healthz ok {start_s:.2f} s after `podman run`")
    metrics_url = f"http://{disp_ip}:8080/metrics"

    workers = {}
    for i in range(3):
        name = f"{PREFIX}-worker{i}"
        started = time.time()
        made.containers.append(name)
        podman("run", "-d", "--name", name, "--network", net, "-v", f"{shards}:/data:ro", IMAGE,
               "worker", "--dispatcher", f"{disp}:5000", "--port", "5001", "--http-port", "8080",
               "--heartbeat-ms", "200", "--buffer-bytes", "1M")
        ip = container_ip(name, net)
        wait_healthy(ip, 8080, name)
        advertised = wait_for(lambda: re.search(r"serving on (\S+?):(\d+),", logs(name)),
                              f"{name}'s log line")
        if advertised.group(1) != ip:
            fail(f"{name} advertises {advertised.group(1)}, not its container address {ip}")
        workers[name] = ip
        step(f"{name} at {ip} (advertised), /healthz ok {time.time() - started:.2f} s after "
             "`podman run`")
    wait_for(lambda: metric(http(metrics_url)[1], "stoker_dispatcher_workers") == 3,
             "3 workers registered on the dispatcher's /metrics", timeout=30)

    # The trainers: on the host (over the podman network's bridge) and in a container.
    consumer_port = free_port()
    host_keys = os.path.join(work, "host-keys.txt")
    host = subprocess.Popen(
        [STOKER, "consume", "--dispatcher", f"{disp_ip}:5000", os.path.join(job, "spec.json"),
         "--epochs", "2", "--print-keys", "--step-ms", STEP_MS, "--http-port",
         str(consumer_port)], stdout=open(host_keys, "w"),
        stderr=open(os.path.join(OUT_DIR, "host-consumer.log"), "w"))
    made.procs.append(host)
    trainer = f"{PREFIX}-trainer"
    made.containers.append(trainer)
    ctr_keys = os.path.join(work, "container-keys.txt")
    ctr = subprocess.Popen(
        ["podman", "run", "--name", trainer, "--network", net, "-v", f"{job}:/job:ro", IMAGE,
         "consume", "--dispatcher", f"{disp}:5000", "/job/spec.json", "--epochs", "2",
         "--print-keys", "--step-ms", STEP_MS], stdout=open(ctr_keys, "w"),
        stderr=open(os.path.join(OUT_DIR, "container-consumer.log"), "w"))
    made.procs.append(ctr)
    pytrainer = f"{PREFIX}-pytrainer"
    made.containers.append(pytrainer)
    py_keys = os.path.join(work, "python-keys.txt")
    py = subprocess.Popen(
        ["podman", "run", "--name", pytrainer, "--network", net, "-v", f"{job}:/job:ro",
         PY_IMAGE, "/job/container_trainer.py", f"{disp}:5000", "/data", "2", STEP_MS],
        stdout=open(py_keys, "w"), stderr=open(os.path.join(OUT_DIR, "python-consumer.log"), "w"))
    made.procs.append(py)

    def received():
        return metric_sum(http(f"http://127.0.0.1:{consumer_port}/metrics")[1],
                          "stoker_client_delivered_elements_total{")

    def leased(ip):
        return metric_sum(http(metrics_url)[1],
                          f'stoker_dispatcher_splits_leased_total{{worker="{ip}:')

    # Mid-epoch 0: kill -9 a worker container that holds a split.
    victim = wait_for(lambda: received() >= 20 and next(
        (n for n, ip in workers.items() if leased(ip) >= 1), None),
        "a worker to hold a split while the host trainer reads", timeout=60)
    if host.poll() is not None:
        fail("the host trainer finished before a worker could be killed: make the epoch longer")
    at = received()
    podman("kill", "-s", "KILL", victim)
    step(f"killed {victim} (kill -9) after {at:.0f} elements of epoch 0")
    wait_for(lambda: metric(http(metrics_url)[1], "stoker_dispatcher_workers") == 2,
             "the dispatcher to count the killed worker lost", timeout=30)
    wait_for(lambda: re.search(re.escape(f"({workers[victim]}:5001) missed its heartbeats; "
                                         "leasing its splits again"), logs(disp)),
             "the dispatcher's log to lease the killed worker's splits again", timeout=30)

    # The status page and /metrics, over the network, name the 2 live workers.
    status, page = http(f"http://{disp_ip}:8080/")
    if status != 200 or not all(ip in page for n, ip in workers.items() if n != victim):
        fail(f"the status page ({status}) does not list the live workers {workers}")
    step("status page and /metrics read over the network: 2 live workers listed")

    # In epoch 1: the dispatcher container killed, removed, and a new one started on the journal
    # volume at the same address.
    wait_for(lambda: received() >= len(expected) + 5, "the host trainer in epoch 1",
             timeout=120)
    if host.poll() is not None:
        fail("the host trainer finished before the dispatcher could be restarted")
    mac = podman("inspect", "-f", "{{(index .NetworkSettings.Networks \"" + net +
                 "\").MacAddress}}", disp)
    podman("kill", "-s", "KILL", disp)
    open(os.path.join(OUT_DIR, "dispatcher-first.log"), "w").write(logs(disp))
    podman("rm", "-f", disp)
    made.containers.remove(disp)
    _, restart_s = start_dispatcher(disp_ip, mac)
    replayed = wait_for(lambda: re.search(r"replayed (\d+) updates", logs(disp)),
                        "the new dispatcher container to replay its journal")
    if host.poll() is not None:
        fail("the host trainer finished before the new dispatcher container was up: the "
             "restart was not mid-epoch (make the epoch longer)")
    step(f"dispatcher container replaced (kill -9, rm, run on the volume) at {received():.0f} "
         f"elements: replayed {replayed.group(1)} updates, /healthz ok {restart_s:.2f} s after "
         "`podman run`")

    for p, who in ((host, "host trainer"), (ctr, "container trainer"),
                   (py, "Python container trainer")):
        try:
            rc = p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            fail(f"the {who} did not finish in 300 s")
        if rc != 0:
            fail(f"the {who} exited with {rc}: see {OUT_DIR}/*consumer.log")
    check_epochs(read(host_keys).split(), expected, 2, "the host trainer")
    check_epochs(read(ctr_keys).split(), expected, 2, "the container trainer")
    check_epochs(read(py_keys).split(), expected, 2, "the Python container trainer")
    step("the 3 trainers (host CLI, container CLI, container Python): 2 epochs, every key "
         "exactly once in each")


def kube_rendering(shards):
    """deploy/kubernetes/stoker.yaml as podman kube play takes it (docs/deploy.md lists the
    changes): the kinds podman plays (Deployment, PersistentVolumeClaim), the test's image and
    names, and the shards at /data on the workers."""
    import yaml
    docs = list(yaml.safe_load_all(open(os.path.join(SOURCE_DIR, "deploy", "kubernetes",
                                                     "stoker.yaml"))))
    out = []
    for d in docs:
        if not d or d["kind"] not in ("StatefulSet", "Deployment"):
            continue  # Services, RBAC, the PodDisruptionBudget: nothing podman plays
        pod = d["spec"]["template"]["spec"]
        pod.pop("serviceAccountName", None)
        # podman 4.3 makes an emptyDir a named volume of the volume's name, shared by every pod
        # that names it; with a read-only root file system it mounts a tmpfs at /tmp anyway.
        pod["volumes"] = [v for v in pod.get("volumes", []) if "emptyDir" not in v]
        for c in pod["containers"]:
            c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] != "tmp"]
        for c in pod["containers"]:
            c["image"] = IMAGE
            # podman runs liveness/readiness probes as commands in the container (curl), which
            # the image does not have; the test reads /healthz itself.
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                c.pop(probe, None)
            c.pop("envFrom", None)  # no Secret stoker-storage here
            # podman 4.3 publishes every containerPort on the host (8080 twice would collide);
            # the pods are reached at their addresses on the network instead.
            c.pop("ports", None)
        if d["kind"] == "StatefulSet":
            # A Deployment of one pod whose journal is a PersistentVolumeClaim (a podman volume).
            claim = f"{PREFIX}-kube-journal"
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim, "annotations": {
                            # podman ignores fsGroup: the volume is made the user's instead
                            "volume.podman.io/uid": "10001", "volume.podman.io/gid": "10001"}},
                        "spec": d["spec"]["volumeClaimTemplates"][0]["spec"]})
            pod["volumes"].append({"name": "journal",
                                   "persistentVolumeClaim": {"claimName": claim}})
            c = pod["containers"][0]
            # No API server to scale the workers' Deployment through: a fixed pool.
            c["args"] = [a for a in c["args"] if not a.startswith(
                ("--autoscale", "--k8s-", "--min-workers", "--max-workers"))]
            d = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": d["metadata"],
                 "spec": {k: v for k, v in d["spec"].items()
                          if k in ("replicas", "selector", "template")}}
        else:
            # podman does not fill status.podIP: no --host=$(POD_IP); a worker then advertises
            # its address on the route to the dispatcher, which is its pod's address.
            c = pod["containers"][0]
            c["env"] = [e for e in c.get("env", []) if e["name"] != "POD_IP"]
            c["args"] = [a for a in c["args"] if a != "--host=$(POD_IP)"]
            pod["volumes"].append({"name": "data", "hostPath": {"path": shards,
                                                                "type": "Directory"}})
            pod["containers"][0]["volumeMounts"].append({"name": "data", "mountPath": "/data",
                                                         "readOnly": True})
        d["metadata"].pop("namespace", None)
        # podman 4.3 makes one pod of a Deployment, whatever its replicas: one Deployment of 1
        # replica per worker instead.
        replicas = d["spec"].get("replicas", 1)
        name = d["metadata"]["name"]
        for i in range(replicas):
            copy = json.loads(json.dumps(d))
            copy["spec"]["replicas"] = 1
            copy["metadata"]["name"] = f"{PREFIX}-{name}" + (f"-{i}" if replicas > 1 else "")
            out.append(copy)
    return out


def run_kube(made, work, job, expected, shards):
    rendered = kube_rendering(shards)
    # The workers find the dispatcher by name: the name of its pod on the kube network.
    disp_dep = next(d for d in rendered if d["kind"] == "Deployment" and
                    d["metadata"]["name"].endswith("stoker-dispatcher"))
    disp_pod = disp_dep["metadata"]["name"] + "-pod-0"
    for d in rendered:
        if d["kind"] == "Deployment" and "stoker-worker" in d["metadata"]["name"]:
            c = d["spec"]["template"]["spec"]["containers"][0]
            c["args"] = [f"--dispatcher={disp_pod}:5000" if a.startswith("--dispatcher=")
                         else a for a in c["args"]]
    import yaml
    path = os.path.join(OUT_DIR, "kube-play.yaml")
    with open(path, "w") as f:
        yaml.safe_dump_all(rendered, f, sort_keys=False)
    made.kube.append(path)
    made.volumes.append(f"{PREFIX}-kube-journal")
    started = time.time()
    out = podman("kube", "play", path, timeout=300)
    step(f"podman kube play: {' '.join(out.split())[:300]}")
    pods = podman("pod", "ps", "--filter", f"name={PREFIX}", "--format", "{{.Name}}").split()
    ips = {}
    for pod in pods:
        infra = podman("pod", "inspect", "-f", "{{.InfraContainerID}}", pod)
        ips[pod] = podman("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}"
                          "{{end}}", infra)
    disp_ip = ips[disp_pod]
    wait_healthy(disp_ip, 8080, "the kube dispatcher pod")
    step(f"kube dispatcher pod {disp_pod} at {disp_ip}: /healthz ok "
         f"{time.time() - started:.2f} s after `podman kube play` began")
    metrics_url = f"http://{disp_ip}:8080/metrics"
    wait_for(lambda: metric(http(metrics_url)[1], "stoker_dispatcher_workers") == 2,
             "2 kube worker pods registered", timeout=60)
    page = http(f"http://{disp_ip}:8080/")[1]
    for pod, ip in ips.items():
        if pod != disp_pod and ip not in page:
            fail(f"the status page does not list worker pod {pod} at {ip}")
    keys = subprocess.run(
        [STOKER, "consume", "--dispatcher", f"{disp_ip}:5000", os.path.join(job, "spec.json"),
         "--print-keys"], capture_output=True, text=True, timeout=300)
    if keys.returncode != 0:
        fail(f"the trainer against the kube pods failed: {keys.stderr[-2000:]}")
    check_epochs(keys.stdout.split(), expected, 1, "the trainer of the kube pods")
    step(f"kube pods: 2 workers at their pod addresses, every key exactly once "
         f"({len(pods)} pods: {', '.join(sorted(pods))})")
    podman("kube", "down", path, timeout=300)
    made.kube.remove(path)


def main():
    if shutil.which("podman") is None:
        print("SKIP: podman is not installed (scripts/install-deps.sh installs it)")
        return
    if os.geteuid() != 0:
        print("SKIP: not root: the trainer on the host reaches the containers through rootful "
              "podman's bridge (rootless podman's networks are not reachable from the host)")
        return
    os.makedirs(OUT_DIR, exist_ok=True)
    remove_leftovers()
    made = Containers()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest's timeout: clean up first
    work = tempfile.mkdtemp(prefix="stoker-container-")
    try:
        if not build_image(work):
            return
        shards, job, expected = make_dataset(work)
        run_cluster(made, work, shards, job, expected)
        run_kube(made, work, job, expected, shards)
        step("PASS")
    finally:
        made.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
