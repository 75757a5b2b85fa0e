#!/usr/bin/env bash
# Tuning sweep on the GPU machine: builds the CLI with several recurrent-kernel configurations
# (rows per warp and minimum resident blocks per SM, for float32 and 16-bit state) and benchmarks each.
# usage: bench/sweep.sh "R32:MB32:R16:MB16:W32:W16 ..." [gdn bench args]  (W: warps per block)
set -uo pipefail
OUT=${OUT:-sweep-out}; mkdir -p "$OUT"
configs=$1; shift
for c in $configs; do
  IFS=: read -r r32 mb32 r16 mb16 w32 w16 <<< "$c"; w32=${w32:-1}; w16=${w16:-4}; tag=$r32-$mb32-$r16-$mb16-$w32-$w16; B=build-sweep-$tag
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    "-DCMAKE_CUDA_FLAGS=-DGDN_REC_ROWS_F32=$r32 -DGDN_REC_MB_F32=$mb32 -DGDN_REC_ROWS_16=$r16 -DGDN_REC_MB_16=$mb16 -DGDN_REC_WARPS_F32=$w32 -DGDN_REC_WARPS_16=$w16" > /dev/null 2>&1
  cmake --build $B -j 16 --target gdn_cli > "$OUT/build-$tag.log" 2>&1 || { echo "build $c failed"; grep error "$OUT/build-$tag.log" | head; continue; }
  echo "== f32: warps $w32 rows $r32 min_blocks $mb32; 16-bit: warps $w16 rows $r16 min_blocks $mb16"
  $B/bin/gdn bench "$@" --out "$OUT/sweep-$tag.json" | tail -n +3 | grep -v "^wrote"
done
