#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build with CUDA (Release), run the whole test suite for real, replay the
# golden cases on the CUDA backend, report kernel resources, and optionally run tools passed as
# STAGES (space-separated: tests replay ptxas sanitize sanitize_paths bench peers ab ncu python). Logs go to $OUT (or ./device-out).
set -uo pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
STAGES=${STAGES:-"tests replay ptxas"}  # also: sanitize sanitize_paths bench peers ab ncu python
B=build-dev
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${CMAKE_EXTRA:-} > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build $B -j 16 > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for s in $STAGES; do
  case $s in
    tests) (cd $B && ctest -j 8 --timeout 120 --output-on-failure > "$OUT/ctest.log" 2>&1); echo "ctest rc=$?"; grep -E "tests passed|tests failed" "$OUT/ctest.log"; grep -E "^\s+[0-9]+ - .*\(Failed|Timeout|SEGFAULT|Exception\)" "$OUT/ctest.log" | head -30 ;;
    replay) $B/bin/gdn replay tests/data/golden --backend cuda 2>&1 | tee "$OUT/replay.log" | tail -25 ;;
    ptxas) nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -Isrc --expt-relaxed-constexpr -Xptxas -v -c src/cuda/launch/launch_bf16_f32.cu -o "$OUT/ptxas_f32.o" > "$OUT/ptxas.log" 2>&1; nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -Isrc --expt-relaxed-constexpr -Xptxas -v -c src/cuda/launch/launch_bf16_bf16.cu -o "$OUT/ptxas_bf16.o" >> "$OUT/ptxas.log" 2>&1; grep -E "registers|spill" "$OUT/ptxas.log" | sort | uniq -c | head -20 ;;
    sanitize) # every CUDA test (golden, properties, hostile metadata) under memcheck; racecheck on a subset
      timeout ${MEMCHECK_S:-150} compute-sanitizer --tool memcheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="*cuda*" > "$OUT/sanitize_memcheck.log" 2>&1; echo "memcheck rc=$?"
      timeout ${RACECHECK_S:-90} compute-sanitizer --tool racecheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="Golden*cuda*:*Hostile*cuda*:*Verify*cuda*" > "$OUT/sanitize_racecheck.log" 2>&1; echo "racecheck rc=$?"
      grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|PASSED|FAILED" "$OUT"/sanitize_*.log | sort | uniq -c | head -12 ;;
    sanitize_paths) # the pipelined kernels' tests (their forced paths): memcheck and racecheck
      timeout ${MEMCHECK_S:-150} compute-sanitizer --tool memcheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="*cuda_pipelined*:*cuda_step_pipelined*:*Pipelined*:*FusedDefault*:*FusedLaunches*" > "$OUT/sanitize_paths_memcheck.log" 2>&1; echo "memcheck (paths) rc=$?"
      timeout ${RACECHECK_S:-90} compute-sanitizer --tool racecheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="*PipelinedFused*:*FusedDefault*:Golden*cuda_step_pipelined*" > "$OUT/sanitize_paths_racecheck.log" 2>&1; echo "racecheck (paths) rc=$?"
      grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT"/sanitize_paths_*.log | sort | uniq -c | head -12 ;;
    bench) $B/bin/gdn bench ${BENCH_ARGS:-} --out "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"; tail -2 "$OUT/bench.log" ;;
    peers) timeout ${PEERS_S:-120} python3 bench/peers.py --peers vllm_sigmoid,vllm_recurrent,fla_recurrent --ours-json "$OUT/bench.json" --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1; echo "peers rc=$?"; tail -3 "$OUT/peers.log" ;;
    ab) # A/B of forced kernel paths on one binary: AB_PATHS="auto lean" (gdn bench --path), each with
        # gdn bench $BENCH_ARGS, AB_REPEAT rounds (default 1) of all paths in turn, then bench/compare.py
        # (per case the median over the rounds)
      for r in $(seq 1 ${AB_REPEAT:-1}); do for e in ${AB_PATHS:-auto}; do
        $B/bin/gdn bench ${BENCH_ARGS:-} --path "$e" --out "$OUT/ab-$e-$r.json" > "$OUT/ab-$e-$r.log" 2>&1
        rc=$?; echo "ab $e round $r rc=$rc"; [ $rc = 0 ] && rm -f "$OUT/ab-$e-$r.log"; done; done  # (few files come back)
      runs=""; for e in ${AB_PATHS:-auto}; do runs="$runs $e=$(ls "$OUT"/ab-$e-*.json | paste -sd,)"; done
      python3 bench/compare.py $runs --ratio | tee "$OUT/ab.md" ;;
    ncu) # warp-stall samples per SASS line of one launch (NCU_KERNEL regex, NCU_BENCH: gdn bench arguments)
      timeout ${NCU_S:-240} ncu --kernel-name "regex:${NCU_KERNEL:-recurrent_tma_kernel}" --launch-skip ${NCU_SKIP:-3} \
        --launch-count 1 --section SourceCounters --section WarpStateStats -o "$OUT/prof" \
        $B/bin/gdn bench ${NCU_BENCH:---models qwen3-next-tp1 --n 64 --t 1 --ops fused} > "$OUT/ncu.log" 2>&1
      echo "ncu rc=$?"; ncu --import "$OUT/prof.ncu-rep" --page source --csv --print-source sass > "$OUT/src.csv" 2>&1
      python3 bench/ncu_stalls.py "$OUT/src.csv" | tee "$OUT/stalls.txt" | head -45
      gzip -f "$OUT/src.csv"; rm -f "$OUT/prof.ncu-rep" ;;
    python) GDN_SKIP_DEPS=1 timeout ${PYTHON_S:-200} make test-python BUILD=$B > "$OUT/python.log" 2>&1; echo "python rc=$?"; tail -15 "$OUT/python.log" ;;
  esac
done
