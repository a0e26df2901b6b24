"""`stoker mount` vs s3fs vs `rclone mount`, on the same Swift S3 server and objects.

Workloads: one 256 MiB object read sequentially (8 MiB reads); 2,000 x 100 KiB files read whole by
8 reader threads; `ls -l` of those 2,000 files (listdir + stat of each).
cold: a fresh mount for every run and the kernel page cache dropped (when root), so nothing is
cached anywhere. warm: one mount, one unmeasured run, then the measured runs (s3fs with its
use_cache disk cache, rclone with --vfs-cache-mode full, stoker with its RAM block cache and the
kernel page cache it keeps while ETags are unchanged).
"""
import concurrent.futures
import os
import shutil
import subprocess
import time

import lib

BUCKET = "bench-mount"
BIG_BYTES = 256 << 20
SMALL_FILES = 2000
SMALL_BYTES = 100 << 10
READERS = 8


class Mount:
    """Mounts with `command` (which returns once mounted or backgrounds itself) at `path`."""

    def __init__(self, name, path, command, env, cache_dir=None):
        self.name, self.path, self.command, self.env, self.cache_dir = name, path, command, env, cache_dir

    def __enter__(self):
        os.makedirs(self.path, exist_ok=True)
        if self.cache_dir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            os.makedirs(self.cache_dir)
        subprocess.run(self.command, env=self.env, check=True, stdout=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.ismount(self.path):
            if time.time() > deadline:
                raise RuntimeError(f"{self.name} did not mount within 30 s")
            time.sleep(0.05)
        return self.path

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", self.path], check=False, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while os.path.ismount(self.path) and time.time() < deadline:
            time.sleep(0.05)


def mounts(ctx, env, warm):
    """(name, factory of a fresh Mount) for each tool; `warm` selects the caching variants."""
    base = os.path.join(ctx.tmp, "mnt")
    s3fs_env = dict(env, AWSACCESSKEYID=env["AWS_ACCESS_KEY_ID"],
                    AWSSECRETACCESSKEY=env["AWS_SECRET_ACCESS_KEY"])
    s3fs_opts = (f"url={env['AWS_ENDPOINT_URL']},use_path_request_style,endpoint=us-east-1,ro,"
                 "parallel_count=16,multireq_max=16")
    s3fs_cache = os.path.join(ctx.tmp, "s3fs-cache")
    if warm:
        s3fs_opts += f",use_cache={s3fs_cache}"
    rclone_env = dict(env)
    rclone_env.pop("AWS_CA_BUNDLE", None)
    rclone_env.update({
        "RCLONE_CONFIG_SWIFTS3_TYPE": "s3",
        "RCLONE_CONFIG_SWIFTS3_PROVIDER": "Other",
        "RCLONE_CONFIG_SWIFTS3_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
        "RCLONE_CONFIG_SWIFTS3_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        "RCLONE_CONFIG_SWIFTS3_ENDPOINT": env["AWS_ENDPOINT_URL"],
        "RCLONE_CONFIG_SWIFTS3_REGION": "us-east-1",
        "RCLONE_CONFIG_SWIFTS3_FORCE_PATH_STYLE": "true",
    })
    rclone_cache = os.path.join(ctx.tmp, "rclone-cache")
    rclone_cmd = ["rclone", "mount", f"swifts3:{BUCKET}", os.path.join(base, "rclone"), "--daemon",
                  "--read-only", "--cache-dir", rclone_cache,
                  "--vfs-cache-mode", "full" if warm else "off"]
    return [
        ("stoker mount", lambda: Mount("stoker", os.path.join(base, "stoker"),
                                       [ctx.stoker, "mount", f"s3://{BUCKET}",
                                        os.path.join(base, "stoker"), "--cache-size", "1G"], env)),
        ("s3fs" + (" (use_cache)" if warm else ""),
         lambda: Mount("s3fs", os.path.join(base, "s3fs"),
                       ["s3fs", BUCKET, os.path.join(base, "s3fs"), "-o", s3fs_opts], s3fs_env,
                       cache_dir=s3fs_cache if warm else None)),
        ("rclone mount" + (" (vfs-cache full)" if warm else ""),
         lambda: Mount("rclone", os.path.join(base, "rclone"), rclone_cmd, rclone_env,
                       cache_dir=rclone_cache)),
    ]


def read_whole(path, chunk=8 << 20):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                return n
            n += len(b)


def workloads(expected_small):
    def sequential(root):
        if read_whole(os.path.join(root, "big.bin")) != BIG_BYTES:
            raise RuntimeError("short sequential read")

    def small_files(root):
        names = [os.path.join(root, "small", f"s{i:04d}.bin") for i in range(SMALL_FILES)]
        with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
            total = sum(pool.map(lambda p: read_whole(p, 1 << 20), names))
        if total != expected_small:
            raise RuntimeError(f"small files: {total} bytes read, {expected_small} expected")

    def ls(root):
        entries = [e for e in os.scandir(os.path.join(root, "small")) if e.stat().st_size >= 0]
        if len(entries) != SMALL_FILES:
            raise RuntimeError(f"ls: {len(entries)} entries")

    return [
        (f"{BIG_BYTES >> 20} MiB sequential", sequential, BIG_BYTES),
        (f"{SMALL_FILES} x {SMALL_BYTES >> 10} KiB, {READERS} readers", small_files, expected_small),
        (f"ls -l of {SMALL_FILES} files", ls, 0),
    ]


def run(ctx):
    env = ctx.s3()
    ctx.aws(env, "s3", "mb", f"s3://{BUCKET}")
    src = os.path.join(ctx.tmp, "mount-src")
    os.makedirs(os.path.join(src, "small"), exist_ok=True)
    with open(os.path.join(src, "big.bin"), "wb") as f:
        for _ in range(BIG_BYTES // (8 << 20)):
            f.write(os.urandom(8 << 20))
    for i in range(SMALL_FILES):
        with open(os.path.join(src, "small", f"s{i:04d}.bin"), "wb") as f:
            f.write(os.urandom(SMALL_BYTES))
    lib.log("uploading 256 MiB + 2,000 small files")
    ctx.aws(env, "s3", "cp", "--recursive", "--quiet", src, f"s3://{BUCKET}/")
    expected_small = SMALL_FILES * SMALL_BYTES

    results = {}  # (mode, workload) -> [Measurement per tool]
    tools = {}
    for mode in ("cold", "warm"):
        tool_mounts = mounts(ctx, env, warm=(mode == "warm"))
        tools[mode] = [name for name, _ in tool_mounts]
        for wl_name, action, nbytes in workloads(expected_small):
            if mode == "cold":
                # The tools take turns, one run each per round, so that a change in the shared
                # machine's load hits all of them alike; every run gets a fresh mount and no page
                # cache.
                runs = {name: [] for name, _ in tool_mounts}
                for _ in range(ctx.repeat):
                    for tool_name, make in tool_mounts:
                        state = {}

                        def before(make=make, state=state):
                            state["m"] = make()
                            state["root"] = state["m"].__enter__()
                            lib.drop_page_cache()

                        runs[tool_name].append(lib.measure(
                            f"{tool_name}, {wl_name}, {mode}", lambda: action(state["root"]),
                            nbytes, 1, ctx.s3_marker, before_each=before))
                        state["m"].__exit__()
                for tool_name, _ in tool_mounts:
                    ms = runs[tool_name]
                    m = lib.Measurement(f"{tool_name}, {wl_name}, {mode}",
                                        [x for r in ms for x in r.seconds],
                                        [x for r in ms for x in r.server_cpu], nbytes)
                    lib.log(f"{m.name}: median {m.median:.3f} s over {ctx.repeat} runs "
                            f"{[round(x, 3) for x in m.seconds]}")
                    results.setdefault((mode, wl_name), []).append(m)
            else:
                for tool_name, make in tool_mounts:
                    with make() as root:
                        action(root)  # fills the caches
                        m = lib.measure(f"{tool_name}, {wl_name}, {mode}", lambda: action(root),
                                        nbytes, ctx.repeat, ctx.s3_marker)
                    results.setdefault((mode, wl_name), []).append(m)

    lines = [
        "# stoker mount vs s3fs vs rclone mount",
        "",
        lib.machine_line() + " Load average (1, 5, 15 min) at the end: "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + ".",
        f"Medians of {ctx.repeat} runs. Swift S3 server on 127.0.0.1. cold: fresh mount and dropped "
        "page cache for every run, the tools taking turns run by run; warm: same mount after one "
        "unmeasured run (s3fs with use_cache, rclone with --vfs-cache-mode full). Server CPU: "
        "Swift's user+system seconds in the run.",
        "",
    ]
    for mode in ("cold", "warm"):
        lines += [f"## {mode}", "", "| workload | tool | seconds | MB/s | server CPU s | speed vs s3fs |",
                  "|---|---|---|---|---|---|"]
        for (m_mode, wl), ms in results.items():
            if m_mode != mode:
                continue
            s3fs = ms[1]
            for tool, m in zip(tools[mode], ms):
                mbps = f"{m.mb_per_s:.0f}" if m.nbytes else "-"
                lines.append(f"| {wl} | {tool} | {m.median:.3f} | {mbps} | {m.cpu_median:.2f} | "
                             f"{s3fs.median / m.median:.2f} |")
        lines.append("")
    cold = {wl: ms for (mode, wl), ms in results.items() if mode == "cold"}
    wl_names = [w[0] for w in workloads(expected_small)]
    lines += [
        f"- stoker / s3fs, small files cold: **{cold[wl_names[1]][1].median / cold[wl_names[1]][0].median:.2f}** (goal >= 2)",
        f"- stoker / s3fs, sequential cold: **{cold[wl_names[0]][1].median / cold[wl_names[0]][0].median:.2f}** (goal >= 1.2)",
        "",
    ]
    ctx.write_result("mount", "\n".join(lines))
