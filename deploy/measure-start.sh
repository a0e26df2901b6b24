#!/usr/bin/env bash
# Start time of stoker's image: container start (`podman run -d`) to /healthz answering 200, for
# the dispatcher and a worker, RUNS times each (bench/results/deploy.md).
#   deploy/measure-start.sh [IMAGE] [RUNS]      (IMAGE default localhost/stoker:latest, RUNS 5)
# Uses a podman network of its own (removed at the end) and curl on this host.
set -euo pipefail
image=${1:-localhost/stoker:latest}
runs=${2:-5}
net=stoker-start-$$
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z ${CONTAINERS_CONF:-} ]] && ! podman run --rm --network none --entrypoint true "$image" >/dev/null 2>&1; then
  export CONTAINERS_CONF="$repo/deploy/podman/containers.conf"
fi
podman network create "$net" >/dev/null
trap 'podman rm -f -t 0 "$net-d" "$net-w" >/dev/null 2>&1; podman network rm -f "$net" >/dev/null' EXIT
now() { date +%s.%N; }
ds=() ws=()
wait_ok() {  # $1: container; prints the seconds from $2 to /healthz 200
  local ip
  ip=$(podman inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$1")
  until curl -sf -o /dev/null --max-time 1 "http://$ip:8080/healthz"; do sleep 0.02; done
  printf "%.2f" "$(echo "$(now) - $2" | bc)"
}
echo "image $image, $runs runs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= runs; i++)); do
  t=$(now)
  podman run -d --name "$net-d" --network "$net" "$image" dispatcher --port 5000 --http-port 8080 >/dev/null
  d=$(wait_ok "$net-d" "$t")
  t=$(now)
  podman run -d --name "$net-w" --network "$net" "$image" worker --dispatcher "$net-d:5000" \
    --port 5001 --http-port 8080 >/dev/null
  w=$(wait_ok "$net-w" "$t")
  echo "run $i: dispatcher $d s, worker $w s"
  ds+=("$d") ws+=("$w")
  podman rm -f -t 0 "$net-d" "$net-w" >/dev/null
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median: dispatcher $(median "${ds[@]}") s, worker $(median "${ws[@]}") s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
