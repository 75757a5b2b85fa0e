#!/usr/bin/env bash
# Tuning sweep on the GPU machine: builds the CLI with several recurrent-kernel configurations
# (rows per warp for float32 state, minimum resident blocks per SM) and benchmarks each.
# usage: bench/sweep.sh "ROWS:MINBLOCKS ..." [gdn bench args]
set -uo pipefail
OUT=${OUT:-sweep-out}; mkdir -p "$OUT"
configs=$1; shift
for c in $configs; do
  rows=${c%%:*}; mb=${c#*:}; B=build-sweep-$rows-$mb
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    "-DCMAKE_CUDA_FLAGS=-DGDN_REC_ROWS_F32=$rows -DGDN_REC_MIN_BLOCKS=$mb" > /dev/null 2>&1
  cmake --build $B -j 16 --target gdn_cli > "$OUT/build-$rows-$mb.log" 2>&1 || { echo "build $c failed"; grep error "$OUT/build-$rows-$mb.log" | head; continue; }
  echo "== rows_f32=$rows min_blocks=$mb"
  $B/bin/gdn bench "$@" --out "$OUT/sweep-$rows-$mb.json" | tail -n +3
done
