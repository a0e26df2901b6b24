#!/usr/bin/env bash
# Installs every Debian 12 package that stoker's build, tests, benchmarks and demo need, and the
# pinned npm packages of the Kubernetes manifest check (deploy/validate) and of the TFRecord
# interop test (tests/tools/tfrecord-writer).
# Idempotent: packages already present are skipped; `apt-get update` runs at most once per call,
# and only when something is missing. Uses sudo when not root.
#   --build-only   only what building the `stoker` binary needs (deploy/Containerfile uses it)
set -euo pipefail

build_only=0
[[ ${1:-} == --build-only ]] && build_only=1

build_packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config clang libclang-rt-14-dev clang-format clang-tidy
  # libraries
  libabsl-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcurl4-openssl-dev libssl-dev libtinyxml2-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libfuse3-dev fuse3 liburing-dev libzstd-dev liblz4-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev pybind11-dev python3-dev
)
packages=(
  "${build_packages[@]}"
  # python (Debian's /usr/bin/python3; there is no PyPI here)
  python3 python3-numpy python3-torch python3-torchvision python3-pytest python3-pybind11 python3-matplotlib
  python3-pil imagemagick
  python3-pip python3-setuptools python3-wheel
  # servers and peers used by tests and benchmarks
  swift swift-proxy swift-object swift-container swift-account python3-swift memcached
  nginx-light s3fs rclone awscli curl fio stress-ng
  # operations: /metrics scraped by a real Prometheus, the status page in headless Chromium
  prometheus chromium
  # multi-host tests on one machine (scripts/netns-cluster): network namespaces, bridges, tc
  iproute2
  # TLS certificates for the service security test
  openssl
  # a test that finds a hung process prints its threads' stacks
  gdb
  # the container image and its test (deploy/build-image.sh, tests/deploy/container_test.py):
  # podman with runc, its networks (netavark, aardvark-dns, and iptables, which netavark calls to
  # set up a network's bridge: without it `podman run --network NET` fails "netavark: No such file
  # or directory"), debootstrap for the base image
  podman runc crun netavark aardvark-dns iptables fuse-overlayfs slirp4netns uidmap catatonit
  debootstrap
  python3-yaml
)

# --build-only: the build's packages alone (not the test servers, PyTorch or Chromium).
((build_only)) && packages=("${build_packages[@]}")

sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# Node.js and npm for the Kubernetes manifests' offline check (deploy/validate) and the TFRecord
# interop test (tests/tools/tfrecord-writer), from Debian unless a node with its npm is already
# installed (another distribution's nodejs package includes npm and conflicts with Debian's).
if ((!build_only)); then
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi

# The npm packages of deploy/validate and tests/tools/tfrecord-writer (the TFRecord writer of
# tests/cli/tfrecord_interop_test.py), exactly as each package-lock.json pins them (into that
# folder's node_modules; nothing global).
install_npm() {
  ((build_only)) && return 0
  local root dir
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  for dir in "$root/deploy/validate" "$root/tests/tools/tfrecord-writer"; do
    if [[ -f $dir/package-lock.json ]] && ! cmp -s "$dir/package-lock.json" \
        "$dir/node_modules/.stoker-installed-lock" 2>/dev/null; then
      echo "install-deps: npm ci in $dir"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error &&
        cp package-lock.json node_modules/.stoker-installed-lock)
    fi
  done
}

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  install_npm
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"

# Debian starts some services on install; the tests start their own instances on free ports.
for svc in nginx memcached prometheus; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
    "${sudo_cmd[@]}" systemctl stop "$svc" || true
  fi
done
# Prometheus would otherwise start again at boot, scraping and storing for nobody.
if command -v systemctl >/dev/null && systemctl is-enabled --quiet prometheus 2>/dev/null; then
  "${sudo_cmd[@]}" systemctl disable prometheus || true
fi
install_npm
echo "install-deps: done"
