#!/usr/bin/env bash
# Tuning sweep on a machine with an NVIDIA GPU: builds the CLI once per configuration of the recurrent kernels'
# tuning macros (src/cuda/register/recurrent.cuh: GDN_REC_* for gated_delta_rule_recurrent, GDN_FUSED_* for
# gdn_attention's fused step) and benchmarks each.
# usage: bench/sweep.sh "CONFIG ..." [gdn bench args]
#   CONFIG: comma-separated NAME=VALUE without the GDN_ prefix, "-" for the defaults, e.g.
#   bench/sweep.sh "- REC_ROWS_16=8,REC_MB_16=20 FUSED_WARPS=4,FUSED_ROWS_F32=8,FUSED_MB=8" --n 64
set -uo pipefail
OUT=${OUT:-sweep-out}; mkdir -p "$OUT"
configs=$1; shift
for c in $configs; do
  flags=""; tag=default
  if [ "$c" != "-" ]; then
    for kv in ${c//,/ }; do flags="$flags -DGDN_$kv"; done
    tag=$(echo "$c" | tr ',=' '_-')
  fi
  B=build-sweep-$tag
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    "-DCMAKE_CUDA_FLAGS=$flags" > /dev/null 2>&1
  cmake --build $B -j 16 --target gdn_cli > "$OUT/build-$tag.log" 2>&1 || { echo "build $c failed"; grep error "$OUT/build-$tag.log" | head; continue; }
  echo "== $c"
  $B/bin/gdn bench "$@" --out "$OUT/sweep-$tag.json" | tail -n +3 | grep -v "^wrote"
done
