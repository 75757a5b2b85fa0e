#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build with CUDA (Release), run the whole test suite for real, replay the
# golden cases on the CUDA backend, report kernel resources, and optionally run tools passed as
# STAGES (space-separated: tests replay ptxas sanitize sanitize_tma bench peers ab ncu python). Logs go to $OUT (or ./device-out).
set -uo pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
STAGES=${STAGES:-"tests replay ptxas"}  # also: sanitize sanitize_tma bench peers ab ncu python
B=build-dev
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${CMAKE_EXTRA:-} > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build $B -j 16 > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for s in $STAGES; do
  case $s in
    tests) (cd $B && ctest -j 8 --timeout 120 --output-on-failure > "$OUT/ctest.log" 2>&1); echo "ctest rc=$?"; grep -E "tests passed|tests failed" "$OUT/ctest.log"; grep -E "^\s+[0-9]+ - .*\(Failed|Timeout|SEGFAULT|Exception\)" "$OUT/ctest.log" | head -30 ;;
    replay) $B/bin/gdn replay tests/data/golden --backend cuda 2>&1 | tee "$OUT/replay.log" | tail -25 ;;
    ptxas) nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -Isrc --expt-relaxed-constexpr -Xptxas -v -c src/cuda/recurrent_bf16_f32.cu -o /tmp/r.o > "$OUT/ptxas.log" 2>&1; nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -Isrc --expt-relaxed-constexpr -Xptxas -v -c src/cuda/recurrent_bf16_bf16.cu -o /tmp/r2.o >> "$OUT/ptxas.log" 2>&1; grep -E "registers|spill" "$OUT/ptxas.log" | sort | uniq -c | head -20 ;;
    sanitize) # every CUDA test (golden, properties, hostile metadata) under memcheck; racecheck on a subset
      timeout ${MEMCHECK_S:-150} compute-sanitizer --tool memcheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="*cuda*" > "$OUT/sanitize_memcheck.log" 2>&1; echo "memcheck rc=$?"
      timeout ${RACECHECK_S:-90} compute-sanitizer --tool racecheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="Golden*cuda*:*Hostile*cuda*:*Verify*cuda*" > "$OUT/sanitize_racecheck.log" 2>&1; echo "racecheck rc=$?"
      grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|PASSED|FAILED" "$OUT"/sanitize_*.log | sort | uniq -c | head -12 ;;
    sanitize_tma) # the pipelined kernels forced everywhere (GDN_CUDA_TMA=1): memcheck and racecheck of their tests
      GDN_CUDA_TMA=1 timeout ${MEMCHECK_S:-150} compute-sanitizer --tool memcheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="*Pipelined*:*FusedDefault*:*FusedLaunches*:*Golden*ttention*cuda*" > "$OUT/sanitize_tma_memcheck.log" 2>&1; echo "memcheck (tma) rc=$?"
      GDN_CUDA_TMA=1 timeout ${RACECHECK_S:-90} compute-sanitizer --tool racecheck --print-limit 20 $B/bin/gdn_tests --gtest_filter="*PipelinedFused*:*FusedDefault*" > "$OUT/sanitize_tma_racecheck.log" 2>&1; echo "racecheck (tma) rc=$?"
      grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT"/sanitize_tma_*.log | sort | uniq -c | head -12 ;;
    bench) $B/bin/gdn bench ${BENCH_ARGS:-} --out "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"; tail -2 "$OUT/bench.log" ;;
    peers) timeout ${PEERS_S:-120} python3 bench/peers.py --peers vllm_sigmoid,vllm_recurrent,fla_recurrent --ours-json "$OUT/bench.json" --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1; echo "peers rc=$?"; tail -3 "$OUT/peers.log" ;;
    ab) # A/B of environment settings on one binary: AB_ENVS="- GDN_TMA_VCONV=0" (space-separated; "-": none,
        # several variables in one setting joined by commas), each with gdn bench $BENCH_ARGS, AB_REPEAT rounds
        # (default 1) of all settings in turn, then bench/compare.py (per case the median over the rounds)
      ab_tag() { if [ "$1" = "-" ]; then echo default; else echo "$1" | tr ',=' '_-'; fi; }
      for r in $(seq 1 ${AB_REPEAT:-1}); do for e in ${AB_ENVS:--}; do tag=$(ab_tag "$e")
        env $( [ "$e" = "-" ] || echo "${e//,/ }") $B/bin/gdn bench ${BENCH_ARGS:-} --out "$OUT/ab-$tag-$r.json" > "$OUT/ab-$tag-$r.log" 2>&1
        rc=$?; echo "ab $e round $r rc=$rc"; [ $rc = 0 ] && rm -f "$OUT/ab-$tag-$r.log"; done; done  # (few files come back)
      runs=""; for e in ${AB_ENVS:--}; do runs="$runs $(ab_tag "$e")=$(ls "$OUT"/ab-$(ab_tag "$e")-*.json | paste -sd,)"; done
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
