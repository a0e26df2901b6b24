#!/usr/bin/env bash
# Builds stoker's container image with podman from deploy/Containerfile (docs/deploy.md).
#
#   deploy/build-image.sh [--tag TAG] [--prebuilt BINARY] [--python] [--base IMAGE] [--jobs N]
#                         [--cold]
#
# The base image (the Containerfile's BASE) is, by default, localhost/debian:12: a Debian 12
# root file system made here from Debian packages alone (debootstrap --variant=minbase, from the
# mirror apt uses) and imported with `podman import`, created once when podman's storage lacks it
# (about 2 minutes) and reused after. `--base docker.io/library/debian:12` builds from a registry
# instead, where one is reachable.
#
# Without --prebuilt: the full two-stage build (the toolchain installed and `stoker` compiled in
# the `build` stage, a unity build through ccache on a cache mount; 14 minutes cold on 2 busy
# cores, about 2 minutes after a one-line change: bench/results/deploy.md). With --prebuilt
# BINARY: the `prebuilt` target, which packs BINARY (a `stoker` built on a Debian 12 host, e.g.
# build/stoker; stripped here) into the same runtime stage; no compilation (seconds once the
# runtime stage's layer is cached).
# --python: the image with Debian's python3 and the Python package `stoker` as well (targets
# `python`, or with --prebuilt `prebuilt-python`, which takes the package BINARY's build assembled
# in BINARY's folder/python/stoker: `cmake --build build --target stoker_python_sources`).
# --jobs N: parallel compile jobs (default: the CPUs). --cold: a build from the base image alone,
# no layer from podman's cache and the compiler cache emptied (to measure it).
#
# Prints the image's name, its size and the commit `stoker --version` names in it.
# Environment: DEBIAN_MIRROR (default: the first Debian URI in /etc/apt/sources.list*);
# CONTAINERS_CONF (podman's; default: its own files, or deploy/podman/containers.conf where a
# container cannot start with them).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag=localhost/stoker:latest
prebuilt=""
base=localhost/debian:12
jobs=""
cold=0
python=0
while (($#)); do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --prebuilt) prebuilt="$2"; shift 2 ;;
    --base) base="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --cold) cold=1; shift ;;
    --python) python=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

command -v podman >/dev/null || {
  echo "build-image.sh: podman is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
}

# The Debian mirror apt uses on this machine (deb822 `URIs:` or one-line `deb URI bookworm ...`).
debian_mirror() {
  if [[ -n ${DEBIAN_MIRROR:-} ]]; then echo "$DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
          2>/dev/null |
        sed -n -e 's/^URIs:[[:space:]]*\(\S*\).*/\1/p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\(\S*\).*/\2/p' |
        grep -E '/debian/?$' | head -1)
  echo "${uri:-http://deb.debian.org/debian}"
}

# localhost/debian:12 from Debian packages: debootstrap into a folder, import it.
make_base() {
  local mirror root started
  mirror=$(debian_mirror)
  command -v debootstrap >/dev/null || {
    echo "build-image.sh: debootstrap is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
  }
  root=$(mktemp -d /tmp/stoker-debian12.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  started=$(date +%s)
  echo "build-image.sh: making $base with debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2
    echo "build-image.sh: debootstrap failed (whole log: $root.log)" >&2
    exit 1
  }
  rm -f "$root.log"
  # apt sources as in Debian's own debian:12 image: the release, its updates and security.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian*}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/log/* \
    "$root/etc/resolv.conf" "$root/etc/hostname"
  tar -C "$root" --numeric-owner -c . |
    podman import --change 'CMD ["/bin/bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$base" >/dev/null
  rm -rf "$root"
  trap - EXIT
  echo "build-image.sh: $base made in $(($(date +%s) - started)) s"
}

if ! podman image exists "$base"; then
  if [[ $base == localhost/* ]]; then
    make_base
  else
    podman pull "$base"
  fi
fi

# Where podman's defaults cannot start a container here, deploy/podman/containers.conf's settings
# (runc, limits within ours) are used, as the test does (docs/deploy.md).
if [[ -z ${CONTAINERS_CONF:-} ]] &&
    ! podman run --rm --network none "$base" true >/dev/null 2>&1; then
  export CONTAINERS_CONF="$repo/deploy/podman/containers.conf"
  echo "build-image.sh: podman's defaults cannot run a container here; using $CONTAINERS_CONF"
fi

started=$(date +%s)
if [[ -n $prebuilt ]]; then
  [[ -x $prebuilt ]] || { echo "build-image.sh: $prebuilt is not an executable" >&2; exit 1; }
  ctx=$(mktemp -d /tmp/stoker-bin.XXXXXX)
  trap 'rm -rf "$ctx"' EXIT
  strip -o "$ctx/stoker" "$prebuilt"
  commit=$("$ctx/stoker" --version | sed -n 's/.*(commit \(.*\)).*/\1/p')
  target=prebuilt
  python_args=()
  if ((python)); then
    package="$(dirname "$prebuilt")/python/stoker"
    ls "$package"/_stoker*.so >/dev/null 2>&1 || {
      echo "build-image.sh: $package holds no extension _stoker*.so (build the target" \
        "stoker_python_sources in $(dirname "$prebuilt"))" >&2
      exit 1
    }
    mkdir -p "$ctx/python/stoker"
    cp "$package"/*.py "$ctx/python/stoker/"
    for so in "$package"/_stoker*.so; do strip --strip-unneeded -o "$ctx/python/stoker/${so##*/}" "$so"; done
    target=prebuilt-python
    python_args=(--build-context stoker-py="$ctx/python")
  fi
  # The stage the target packs into, tagged localhost/stoker-stage:STAGE, so that its layers (the
  # apt-get install) stay in podman's cache when the images made from it are removed (the test
  # removes its own): a later build takes seconds, not another apt-get install.
  stage=runtime
  ((python)) && stage=python-runtime
  podman build --network host -f "$repo/deploy/Containerfile" --target "$stage" \
    --build-arg BASE="$base" -t "localhost/stoker-stage:$stage" "$ctx" >/dev/null
  # The context is the folder of the binary alone: the prebuilt stages need nothing else.
  podman build --network host -f "$repo/deploy/Containerfile" --target "$target" \
    --build-arg BASE="$base" --build-arg COMMIT="$commit" --build-context stoker-bin="$ctx" \
    "${python_args[@]}" -t "$tag" "$ctx"
else
  commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || true)
  if [[ -n $commit && -n $(git -C "$repo" status --porcelain --untracked-files=no) ]]; then
    commit="$commit-dirty"
  fi
  cache_args=()
  if ((cold)); then
    # A build from nothing but the base image: no layer from podman's cache, and the compiler
    # cache (the build stage's cache mount, id stoker-ccache) emptied first.
    cache_args=(--no-cache)
    # (buildah keeps cache mounts in $TMPDIR/buildah-cache/ID, or buildah-cache-UID when rootless)
    rm -rf "${TMPDIR:-/var/tmp}"/buildah-cache{,-"$(id -u)"}/stoker-ccache
  fi
  target=image
  ((python)) && target=python
  podman build --network host -f "$repo/deploy/Containerfile" --target "$target" "${cache_args[@]}" \
    --build-arg BASE="$base" --build-arg COMMIT="$commit" --build-arg JOBS="$jobs" \
    -t "$tag" "$repo"
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "build-image.sh: $tag built in $(($(date +%s) - started)) s;" \
  "size $((size / 1000000)) MB; $(podman run --rm --entrypoint /usr/local/bin/stoker "$tag" --version)"
if ((python)); then
  echo "build-image.sh: in Python: $(podman run --rm "$tag")"
fi
