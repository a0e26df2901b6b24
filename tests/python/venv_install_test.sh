#!/usr/bin/env bash
# `pip install .` as docs/python.md gives it: a fresh `git clone` of this repository (its
# committed HEAD), then the install commands of docs/python.md ("Install") exactly as written
# there (a venv on Debian's Python, pip install, activate), then `import stoker`, the `stoker`
# command on PATH with its version, and a pipeline run through both. The C++ compiles come from ccache (shared
# with the other builds), so this takes a few minutes, not a cold build's forty.
# Needs STOKER_SOURCE_DIR (the repository) and STOKER_MAKE_TEST_IMAGES (the built generator).
set -euo pipefail
src=${STOKER_SOURCE_DIR:?set STOKER_SOURCE_DIR to the repository}
make_images=${STOKER_MAKE_TEST_IMAGES:?set STOKER_MAKE_TEST_IMAGES to build/make_test_images}
work=$(mktemp -d "${TMPDIR:-/tmp}/stoker-venv-XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "venv_install_test: $* ($((SECONDS - start)) s)"; }

git clone -q "$src" "$work/stoker"
commit=$(git -C "$work/stoker" rev-parse --short=12 HEAD)
install=$(/usr/bin/python3 "$src/tests/docs_commands_test.py" --install-block "$src")
step "running the install commands of docs/python.md in the clone"
(cd "$work/stoker" && bash -ec "$install")
step "installed"
v="$work/stoker/.venv"
cd "$work"

# The package: from the venv, with its version, metadata and system-library list.
"$v/bin/python" - "$v" <<'PY'
import importlib.metadata, os, sys
import stoker
assert stoker.__file__.startswith(sys.argv[1]), stoker.__file__
assert "torch" not in sys.modules
meta = importlib.metadata.metadata("stoker")
assert meta["Version"] == stoker.__version__, (meta["Version"], stoker.__version__)
requires = importlib.metadata.requires("stoker")
assert "numpy" in requires and any(r.startswith("torch") and "extra" in r for r in requires), requires
libs = open(os.path.join(os.path.dirname(stoker.__file__), "system-libraries.txt")).read()
assert "libcurl" in libs and "libabsl" in libs, libs[:500]
PY

# The command: on PATH once the venv is active, reporting this commit.
. "$v/bin/activate"
[ "$(command -v stoker)" = "$v/bin/stoker" ] || { echo "stoker is not the venv's"; exit 1; }
version=$(stoker --version)
[[ $version =~ ^stoker\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ $commit\)$ ]] \
  || { echo "unexpected version line: $version"; exit 1; }

# A pipeline run: the installed CLI converts and runs, the installed package iterates.
"$make_images" images --classes 2 --per-class 8 --width 32 --height 24 >/dev/null
stoker convert images shards >/dev/null 2>&1
cat > spec.json <<'JSON'
{"source": {"dataset": "shards/"}, "ops": [{"op": "decode_image", "field": "jpg"},
 {"op": "center_crop", "field": "jpg", "size": [16, 16]}, {"op": "batch", "size": 4}]}
JSON
stoker run -q spec.json 2>run.log
grep -q "stoker run: 4 elements, 16 samples" run.log || { cat run.log; exit 1; }
python - <<'PY'
import stoker
pipe = stoker.Pipeline.from_spec("spec.json")
batches = list(pipe)
assert len(batches) == len(pipe) == 4 and batches[0]["jpg"].shape == (4, 16, 16, 3)
assert stoker.dataset("shards/").classes == ["class0", "class1"]
PY
step "passed"
