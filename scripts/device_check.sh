#!/usr/bin/env bash
# On the GPU machine: build with CUDA (Release), run the whole test suite for real, replay the
# golden cases on the CUDA backend, report kernel resources, and optionally run tools passed as
# STAGES (space-separated: tests replay sanitize bench ptxas). Logs go to $OUT (or ./device-out).
set -uo pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
STAGES=${STAGES:-"tests replay ptxas"}
B=build-dev
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${CMAKE_EXTRA:-} > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build $B -j 16 > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for s in $STAGES; do
  case $s in
    tests) (cd $B && ctest -j 8 --output-on-failure > "$OUT/ctest.log" 2>&1); echo "ctest rc=$?"; grep -E "tests passed|tests failed" "$OUT/ctest.log"; grep -E "^\s+[0-9]+ - .*\(Failed|Timeout|SEGFAULT|Exception\)" "$OUT/ctest.log" | head -30 ;;
    replay) $B/bin/gdn replay tests/data/golden --backend cuda 2>&1 | tee "$OUT/replay.log" | tail -25 ;;
    ptxas) nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -Isrc --expt-relaxed-constexpr -Xptxas -v -c src/cuda/recurrent_bf16.cu -o /tmp/r.o > "$OUT/ptxas.log" 2>&1; grep -E "registers|spill" "$OUT/ptxas.log" | sort | uniq -c | head -20 ;;
    sanitize) for tool in memcheck racecheck; do compute-sanitizer --tool $tool --print-limit 20 $B/bin/gdn_tests --gtest_filter="*cuda*:*Cuda*:*CUDA*" > "$OUT/sanitize_$tool.log" 2>&1; echo "$tool rc=$?"; grep -E "ERROR SUMMARY|Hazard|Invalid" "$OUT/sanitize_$tool.log" | head -5; done ;;
    bench) $B/bin/gdn bench ${BENCH_ARGS:-} --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
  esac
done
