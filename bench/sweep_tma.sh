#!/usr/bin/env bash
# Tuning sweep (device): for each CONFIG (comma-separated GDN_ macros without the prefix, "-" = defaults)
# build gdn_cli (all configurations at once, sharing the cores), then run gdn bench with $BENCH_ARGS on
# each in turn; TMAOFF=1 also runs it with GDN_CUDA_TMA=0; TESTS="<gtest filter>" also builds gdn_tests and
# runs those tests of each configuration with GDN_CUDA_TMA=1 (the pipelined kernels forced). Logs and JSON under $OUT.
set -uo pipefail
A=${BENCH_ARGS:-"--models qwen3-next-tp1 --n 64,256 --t 1,4 --ops recurrent"}
tag_of() { if [ "$1" = "-" ]; then echo default; else echo "$1" | tr ',=' '_-'; fi; }
n=$(echo $1 | wc -w); j=$(( 16 / n )); [ $j -lt 2 ] && j=2
for c in $1; do
  flags=""; tag=$(tag_of "$c")
  if [ "$c" != "-" ]; then for kv in ${c//,/ }; do flags="$flags -DGDN_$kv"; done; fi
  ( cmake -S . -B build-sw-$tag -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$flags" > /dev/null 2>&1 &&
    cmake --build build-sw-$tag -j $j --target gdn_cli ${TESTS:+gdn_tests} > $OUT/build-$tag.log 2>&1 ) &
done
wait
for c in $1; do
  tag=$(tag_of "$c"); B=build-sw-$tag
  [ -x $B/bin/gdn ] || { echo "build $c failed"; grep error $OUT/build-$tag.log | head -5; continue; }
  echo "== $c"; timeout 90 $B/bin/gdn bench $A --out $OUT/sw-$tag.json | grep -E "recurrent|fused|tma-prof"
  if [ -n "${TESTS:-}" ]; then GDN_CUDA_TMA=1 timeout 120 $B/bin/gdn_tests --gtest_filter="$TESTS" 2>&1 | grep -E "^\[  (PASSED|FAILED) |tests? ran" | head -8; fi
  if [ -n "${TMAOFF:-}" ]; then echo "== $c TMA off"; GDN_CUDA_TMA=0 timeout 90 $B/bin/gdn bench $A --out $OUT/sw-$tag-off.json | grep -E "recurrent|fused|tma-prof"; fi
done
