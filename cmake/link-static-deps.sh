#!/bin/bash
# The link launcher of the `stoker` executable (RULE_LAUNCH_LINK, with STOKER_STATIC_DEPS=ON;
# docs/architecture.md, "The executable's libraries"). It runs the link command it is given with
# Debian's shared Abseil, protobuf, gRPC, c-ares and re2 libraries taken out and their static
# archives linked instead, as one group at the end (they depend on one another in both
# directions), or the command unchanged if any of those archives is missing (never a mix,
# which would link two copies of a library).
#
# Why: those are 48 of the 93 shared libraries the executable needs, and the dynamic loader's
# symbol lookups for them were most of its start-up (`stoker --version`: 15-23 ms of CPU shared,
# 7-8 ms static; curl 7 ms), paid by every `stoker cat` and every worker process started.
# Only the executable: the Python extension and the plugins are shared objects, and Debian's
# Abseil archives are not built for those (initial-exec thread-local relocations).
set -euo pipefail
shared_re='^(.*/lib(absl_[a-z0-9_]+|grpc|grpc\+\+|gpr|upb|address_sorting|cares|protobuf))\.so(\.[0-9.]+)?$'
command=()
archives=()
libdir=""
for arg in "$@"; do
  if [[ $arg =~ $shared_re ]]; then
    archive="${BASH_REMATCH[1]}.a"
    if [[ ! -f $archive ]]; then exec "$@"; fi
    libdir="${archive%/*}"
    [[ " ${archives[*]-} " == *" $archive "* ]] || archives+=("$archive")
  elif [[ $arg == -lre2 ]]; then
    archives+=(re2)  # resolved below, once the archives' folder is known
  else
    command+=("$arg")
  fi
done
if [[ ${#archives[@]} -eq 0 ]]; then exec "$@"; fi
for i in "${!archives[@]}"; do
  if [[ ${archives[$i]} == re2 ]]; then
    if [[ ! -f $libdir/libre2.a ]]; then exec "$@"; fi
    archives[$i]="$libdir/libre2.a"
  fi
done
exec "${command[@]}" -Wl,--start-group "${archives[@]}" -Wl,--end-group -lssl -lcrypto -lz
