"""P1 and P2: the object-store layer against its peers on the same servers and objects.

P1: one 256 MiB object read whole: `stoker cat` vs one curl vs 16 parallel ranged curls vs an s3fs
    mount + cat, all against the Swift S3 server; plus nginx (raw HTTP) as the ceiling.
P2: 2,000 random 100 KiB ranges of that object: stoker's batched read API (RangedReader::ReadRanges
    via stoker-bench-reads) vs s3fs reading the same bytes with 16 threads vs 16 curl processes
    (each fetching its share of the ranges over one keep-alive connection).
curl reaches Swift through a presigned URL (its --aws-sigv4 cannot carry the access key
`test:tester`, which contains a colon).
"""
import concurrent.futures
import hashlib
import os
import random
import subprocess
import time

import lib

OBJECT_BYTES = 256 << 20
RANGES = 2000
RANGE_BYTES = 100 << 10
PARALLEL = 16


def write_random_file(path, size):
    with open(path, "wb") as f:
        for _ in range(size // (8 << 20)):
            f.write(os.urandom(8 << 20))


def sha256_of_command(cmd, env):
    h = hashlib.sha256()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env) as p:
        for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
            h.update(chunk)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed with {p.returncode}")
    return h.hexdigest()


def sha256_of_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class S3fsMount:
    """A fresh s3fs mount of `bucket` (fresh mount: nothing cached in the kernel or s3fs)."""

    def __init__(self, ctx, env, bucket):
        self.ctx, self.env, self.bucket = ctx, env, bucket
        self.path = os.path.join(ctx.tmp, "s3fs")
        os.makedirs(self.path, exist_ok=True)

    def __enter__(self):
        env = dict(self.env, AWSACCESSKEYID=self.env["AWS_ACCESS_KEY_ID"],
                   AWSSECRETACCESSKEY=self.env["AWS_SECRET_ACCESS_KEY"])
        lib.run(["s3fs", self.bucket, self.path, "-o",
                 f"url={self.env['AWS_ENDPOINT_URL']},use_path_request_style,endpoint=us-east-1,"
                 "ro,stat_cache_expire=1"], env=env)
        deadline = time.time() + 20
        while not os.path.ismount(self.path):
            if time.time() > deadline:
                raise RuntimeError("s3fs did not mount within 20 s")
            time.sleep(0.05)
        return self.path

    def __exit__(self, *exc):
        lib.run(["fusermount3", "-u", self.path], check=False)
        lib.run(["fusermount", "-u", self.path], check=False)


def run(ctx):
    env = ctx.s3()
    bucket = "bench"
    ctx.aws(env, "s3", "mb", f"s3://{bucket}")
    local = os.path.join(ctx.tmp, "www", "obj256")
    os.makedirs(os.path.dirname(local), exist_ok=True)
    write_random_file(local, OBJECT_BYTES)
    expected = sha256_of_file(local)
    lib.run([ctx.stoker, "cp", local, f"s3://{bucket}/obj256"], env=env)
    presigned = ctx.aws(env, "s3", "presign", f"s3://{bucket}/obj256", "--expires-in", "3600").stdout.strip()
    http_base, http_marker = ctx.http(os.path.dirname(local))
    s3_marker = ctx.s3_marker

    # Correctness first, outside the timings: every reader sees the same bytes.
    checks = {
        "stoker cat s3://": [ctx.stoker, "cat", f"s3://{bucket}/obj256"],
        "stoker cat http://": [ctx.stoker, "cat", f"{http_base}/obj256"],
        "curl (presigned)": ["curl", "-sSf", presigned],
    }
    for name, cmd in checks.items():
        if sha256_of_command(cmd, env) != expected:
            raise RuntimeError(f"{name} returned different bytes")

    devnull = subprocess.DEVNULL

    def stoker_cat(url):
        return lambda: subprocess.run([ctx.stoker, "cat", url], stdout=devnull, env=env, check=True)

    def curl_one(url):
        return lambda: subprocess.run(["curl", "-sSf", "-o", "/dev/null", url], env=env, check=True)

    def curl_parallel(url):
        part = OBJECT_BYTES // PARALLEL

        def action():
            procs = [subprocess.Popen(["curl", "-sSf", "-o", "/dev/null", "-r",
                                       f"{i * part}-{(i + 1) * part - 1}", url], env=env)
                     for i in range(PARALLEL)]
            if any(p.wait() != 0 for p in procs):
                raise RuntimeError("a ranged curl failed")
        return action

    def s3fs_cat():
        with S3fsMount(ctx, env, bucket) as mount:
            with open(os.path.join(mount, "obj256"), "rb") as f:
                while f.read(8 << 20):
                    pass

    repeat = ctx.repeat
    p1 = []
    for name, action, marker in [
        ("stoker cat (S3)", stoker_cat(f"s3://{bucket}/obj256"), s3_marker),
        ("curl, 1 GET (S3)", curl_one(presigned), s3_marker),
        (f"curl, {PARALLEL} parallel ranged GETs (S3)", curl_parallel(presigned), s3_marker),
        ("s3fs mount + cat (S3)", s3fs_cat, s3_marker),
        ("stoker cat (nginx)", stoker_cat(f"{http_base}/obj256"), http_marker),
        ("curl, 1 GET (nginx)", curl_one(f"{http_base}/obj256"), http_marker),
        (f"curl, {PARALLEL} parallel ranged GETs (nginx)", curl_parallel(f"{http_base}/obj256"), http_marker),
    ]:
        action()  # warm the server's page cache and connections right before measuring
        p1.append(lib.measure(name, action, OBJECT_BYTES, repeat, marker))

    # P2: the same 2,000 ranges for every reader.
    rng = random.Random(42)
    ranges = sorted((rng.randrange(0, OBJECT_BYTES - RANGE_BYTES), RANGE_BYTES) for _ in range(RANGES))
    rng.shuffle(ranges)
    ranges_file = os.path.join(ctx.tmp, "ranges.txt")
    with open(ranges_file, "w") as f:
        f.writelines(f"{o} {n}\n" for o, n in ranges)
    bench_reads = os.path.join(ctx.build_dir, "stoker-bench-reads")
    # 16 curl processes, each fetching every 16th range in turn over one keep-alive connection.
    # (One curl with --parallel fails some transfers with "Failed initialization" in Debian's 7.88.)
    curl_configs = []
    for i in range(PARALLEL):
        curl_configs.append(os.path.join(ctx.tmp, f"ranges{i}.curl"))
        with open(curl_configs[-1], "w") as f:
            f.write("\nnext\n".join(f'url = "{presigned}"\nrange = "{o}-{o + n - 1}"\noutput = "/dev/null"'
                                     for o, n in ranges[i::PARALLEL]) + "\n")

    def stoker_batched():
        out = subprocess.run([bench_reads, f"s3://{bucket}/obj256", ranges_file], env=env,
                             check=True, capture_output=True, text=True).stdout
        stoker_batched.last = out.strip()

    def s3fs_ranges():
        with S3fsMount(ctx, env, bucket) as mount:
            fd = os.open(os.path.join(mount, "obj256"), os.O_RDONLY)
            try:
                with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
                    got = list(pool.map(lambda r: len(os.pread(fd, r[1], r[0])), ranges))
            finally:
                os.close(fd)
            if got != [n for _, n in ranges]:
                raise RuntimeError("s3fs returned short ranges")

    def curl_ranges():
        procs = [subprocess.Popen(["curl", "-sS", "-K", c], env=env) for c in curl_configs]
        if any(p.wait() != 0 for p in procs):
            raise RuntimeError("a curl fetching ranges failed")

    p2 = []
    for name, action in [
        ("stoker batched read API", stoker_batched),
        ("s3fs, 16 threads of pread", s3fs_ranges),
        (f"{PARALLEL} parallel curls", curl_ranges),
    ]:
        action()
        p2.append(lib.measure(name, action, RANGES * RANGE_BYTES, repeat, s3_marker))

    def row(m, base):
        return (f"| {m.name} | {m.median:.3f} | {m.mb_per_s:.0f} | {m.cpu_median:.2f} | "
                f"{base.median / m.median:.2f} |")

    s3_stoker, s3_curl1, s3_par, s3fs_m = p1[0], p1[1], p1[2], p1[3]
    lines = [
        "# Object-store layer: P1 and P2",
        "",
        lib.machine_line(),
        f"Medians of {repeat} runs after one warm-up run each; server CPU is the S3 server's (Swift "
        "proxy, object, container, account servers and memcached) or nginx's user+system time "
        "during the run. All servers on 127.0.0.1.",
        "",
        f"## P1: one {OBJECT_BYTES >> 20} MiB object, read whole",
        "",
        "| reader | seconds | MB/s | server CPU s | speed vs stoker cat (S3) |",
        "|---|---|---|---|---|",
        *[row(m, s3_stoker) for m in p1],
        "",
        f"- stoker / 16 parallel curls (S3): **{s3_par.median / s3_stoker.median:.2f}** (goal >= 0.9)",
        f"- stoker / s3fs (S3): **{s3fs_m.median / s3_stoker.median:.2f}** (goal >= 2)",
        f"- stoker / one curl (S3): {s3_curl1.median / s3_stoker.median:.2f}",
        f"- stoker / 16 parallel curls (nginx): {p1[6].median / p1[4].median:.2f}",
        "",
        f"## P2: {RANGES} random {RANGE_BYTES >> 10} KiB ranges of that object (S3)",
        "",
        "| reader | seconds | MB/s (requested bytes) | server CPU s | speed vs stoker |",
        "|---|---|---|---|---|",
        *[row(m, p2[0]) for m in p2],
        "",
        f"- stoker / s3fs: **{p2[1].median / p2[0].median:.2f}**",
        f"- stoker / 16 parallel curls: **{p2[2].median / p2[0].median:.2f}**",
        f"- stoker's last run: `{getattr(stoker_batched, 'last', '')}` (requests = HTTP requests sent "
        "after coalescing nearby ranges)",
        "",
    ]
    ctx.write_result("object_store", "\n".join(lines))
