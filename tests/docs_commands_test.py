#!/usr/bin/python3
"""Runs the shell commands of README.md and docs/python.md exactly as written.

Every ```sh block runs with `bash -e` in a scratch folder that looks like a checkout after
`make build` (build/, examples/, scripts/ link to the real ones), with `python3`, `stoker` and
`torchrun` on PATH as in the activated venv of docs/python.md ("Install"), PYTHONPATH holding
build/python, HOME a scratch folder, and AWS_* pointing at a fresh Swift S3 server
(scripts/s3-test-server) whose bucket `bucket` holds what the README's examples name
(`prefix/`, `key`). A directive on the line before a block changes that:

    <!-- docs test: venv -->          the install commands: tests/python/venv_install_test.sh runs
                                      them, as written, in a fresh clone (the block must be the
                                      same in README.md and docs/python.md)
    <!-- docs test: skip REASON -->   not run here; REASON says what runs it instead

usage: docs_commands_test.py SOURCE_DIR BUILD_DIR
"""
import os
import re
import subprocess
import sys
import tempfile
import time

DIRECTIVE = re.compile(r"<!-- docs test: (venv|skip)\b(.*?)-->")


def blocks(path):
    """(line number, directive or None, text) of each ```sh block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            match = DIRECTIVE.search(before)
            out.append((i + 1, match.group(1) if match else None, "\n".join(lines[i + 1:j])))
            i = j
        i += 1
    return out


def install_block(source):
    """The venv install commands of docs/python.md (what venv_install_test.sh runs)."""
    return next(text for _, d, text in blocks(os.path.join(source, "docs", "python.md"))
                if d == "venv")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--install-block":
        print(install_block(sys.argv[2]))
        return 0
    source, build = map(os.path.abspath, sys.argv[1:3])
    docs = [os.path.join(source, "README.md"), os.path.join(source, "docs", "python.md")]
    work = tempfile.mkdtemp(prefix="stoker-docs-")
    home, bindir, s3dir = (os.path.join(work, d) for d in ("home", "bin", "s3"))
    for d in (home, bindir):
        os.makedirs(d)
    checkout = os.path.join(work, "checkout")
    os.makedirs(checkout)
    for name, target in (("build", build), ("examples", os.path.join(source, "examples")),
                         ("scripts", os.path.join(source, "scripts"))):
        os.symlink(target, os.path.join(checkout, name))
    for name, target in (("python3", "/usr/bin/python3"), ("stoker", os.path.join(build, "stoker")),
                         ("torchrun", "/usr/bin/torchrun"), ("aws", "/usr/bin/aws")):
        os.symlink(target, os.path.join(bindir, name))
    env = dict(os.environ, HOME=home, PATH=f"{bindir}:/usr/bin:/bin",
               PYTHONPATH=os.path.join(build, "python"))
    server = os.path.join(source, "scripts", "s3-test-server")
    subprocess.run([server, "start", s3dir], check=True, stdout=subprocess.DEVNULL)
    failures = []
    try:
        exports = subprocess.run([server, "env", s3dir], check=True, capture_output=True,
                                 text=True).stdout
        for name, value in re.findall(r"export (\w+)=(\S+)", exports):
            env[name] = value.strip("'\"")
        # What the README's object-store examples name. Debian's AWS CLI predates
        # AWS_ENDPOINT_URL: it gets the endpoint as a flag.
        setup = f"""
            aws() {{ command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }}
            aws s3 mb s3://bucket >/dev/null
            head -c 2097152 /dev/urandom > key && aws s3 cp key s3://bucket/key >/dev/null
            echo hello > prefix-file && aws s3 cp prefix-file s3://bucket/prefix/hello >/dev/null
            echo local > local-file && mkdir -p local-folder/a && echo 1 > local-folder/a/one
            {build}/make_test_images {home}/imagenet/train --classes 2 --per-class 3 \
                --width 32 --height 24 >/dev/null
        """
        subprocess.run(["bash", "-euc", setup], cwd=checkout, env=env, check=True)
        venv_blocks = []
        for doc in docs:
            for line, directive, text in blocks(doc):
                where = f"{os.path.relpath(doc, source)}:{line}"
                if directive == "venv":
                    venv_blocks.append(text)
                    print(f"{where}: run by tests/python/venv_install_test.sh")
                    continue
                if directive == "skip":
                    print(f"{where}: skipped (see its directive)")
                    continue
                start = time.time()
                result = subprocess.run(["bash", "-ec", text], cwd=checkout, env=env,
                                        capture_output=True, text=True, timeout=600)
                print(f"{where}: exit {result.returncode} in {time.time() - start:.1f} s")
                if result.returncode != 0:
                    failures.append(f"{where} failed:\n{text}\n--- output:\n"
                                    f"{(result.stdout + result.stderr)[-3000:]}")
        if any(text != install_block(source) for text in venv_blocks):
            failures.append("README.md's install block differs from docs/python.md's")
    finally:
        subprocess.run([server, "stop", s3dir], stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", work])
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
