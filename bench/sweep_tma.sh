#!/usr/bin/env bash
# Tuning sweep (device): for each CONFIG (comma-separated GDN_ macros without the prefix, "-" = defaults)
# build gdn_cli and run gdn bench with $BENCH_ARGS; TMAOFF=1 also runs it with GDN_CUDA_TMA=0.
set -uo pipefail
A=${BENCH_ARGS:-"--models qwen3-next-tp1 --n 64,256 --t 1,4 --ops recurrent"}
for c in $1; do
  flags=""; tag=default
  if [ "$c" != "-" ]; then for kv in ${c//,/ }; do flags="$flags -DGDN_$kv"; done; tag=$(echo "$c" | tr ',=' '_-'); fi
  B=build-sw-$tag
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$flags" > /dev/null 2>&1
  cmake --build $B -j 16 --target gdn_cli > $OUT/build-$tag.log 2>&1 || { echo "build $c failed"; grep error $OUT/build-$tag.log | head -5; continue; }
  echo "== $c"; timeout 90 $B/bin/gdn bench $A --out $OUT/sw-$tag.json | grep recurrent
  if [ -n "${TMAOFF:-}" ]; then echo "== $c TMA off"; GDN_CUDA_TMA=0 timeout 90 $B/bin/gdn bench $A --out $OUT/sw-$tag-off.json | grep recurrent; fi
done
