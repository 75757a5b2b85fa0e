#!/usr/bin/env bash
# The twenty-first session's lease (bench/RESULTS.md step 100-101), from the repository root on the
# GPU machine: OUT=<dir> bash bench/experiments/lease_s21.sh [STAGES]; results in $OUT.
#   tests: scripts/device_check.sh "tests replay ptxas" (build-dev, whole ctest, golden replay, ptxas)
#   ab:    the lean kernel's instance choice (lean_more) against both instances forced
#          (GDN_REC_LEAN_MORE=0 / =1) on one binary, recurrence only, three models, two rounds
#   san:   memcheck / racecheck: default choice, and the lean kernel forced in its "more" instances
#   final: gdn bench's full default matrix, then bench/peers.py (needs .peers/) beside it
#   check: the CUDA tests by default and with the lean kernel forced in both instances (gdn_tests, not
#          ctest: the whole ctest takes ~7 minutes), then "ab" with one round (AB_REPEAT)
# Run "tests ab" in one call and "san final" in the next (build-dev is kept while the lease lasts);
# after a change of the instance choice: "check final".
set -uo pipefail
OUT=${OUT:-lease-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); export OUT
STAGES=${1:-"tests ab"}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
B=build-dev
for s in $STAGES; do
  case $s in
    tests) STAGES="tests replay ptxas" bash scripts/device_check.sh; stamp tests ;;
    ab)
      [ -x $B/bin/gdn ] || STAGES=build bash scripts/device_check.sh
      AB_ENVS="- GDN_REC_LEAN_MORE=0 GDN_REC_LEAN_MORE=1" AB_REPEAT=${AB_REPEAT:-2} \
        BENCH_ARGS="--ops recurrent --n 1,2,3,4,8,12,16,32,64,128,256 --t 1,3,4" \
        STAGES=ab bash scripts/device_check.sh > "$OUT/ab_run.log" 2>&1
      grep -E "rc=" "$OUT/ab_run.log"
      grep -E "tp1 \| (1|4|16|64) \| (1|4) \|" "$OUT/ab.md" | head -20; stamp ab ;;
    san)
      [ -x $B/bin/gdn_tests ] || STAGES=build bash scripts/device_check.sh
      MEMCHECK_S=200 RACECHECK_S=100 STAGES=sanitize bash scripts/device_check.sh | tail -8
      F='Golden*cuda*:*Hostile*cuda*:*CudaShapes*:*Verify*cuda*'
      GDN_REC_LEAN=1 GDN_REC_LEAN_MORE=1 timeout 150 compute-sanitizer --tool memcheck --print-limit 20 \
        $B/bin/gdn_tests --gtest_filter="$F" > "$OUT/more_memcheck.log" 2>&1; echo "memcheck (more) rc=$?"
      GDN_REC_LEAN=1 GDN_REC_LEAN_MORE=1 timeout 100 compute-sanitizer --tool racecheck --print-limit 20 \
        $B/bin/gdn_tests --gtest_filter='Golden*cuda*:*Hostile*cuda*:*Verify*cuda*' > "$OUT/more_racecheck.log" 2>&1
      echo "racecheck (more) rc=$?"
      grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT"/more_*.log | sort | uniq -c; stamp san ;;
    check)
      [ -x $B/bin/gdn_tests ] || STAGES=build bash scripts/device_check.sh
      timeout 200 $B/bin/gdn_tests --gtest_filter='*cuda*:*Cuda*' > "$OUT/check_default.log" 2>&1; echo "cuda tests rc=$?"
      for m in 0 1; do
        GDN_REC_LEAN=1 GDN_REC_LEAN_MORE=$m timeout 100 $B/bin/gdn_tests \
          --gtest_filter='Golden*cuda*:*CudaShapes*:*Verify*cuda*:*Hostile*cuda*' > "$OUT/check_more$m.log" 2>&1
        echo "lean forced, GDN_REC_LEAN_MORE=$m: rc=$?"
      done
      grep -hE "^\[  (PASSED|FAILED)|tests ran" "$OUT"/check_*.log
      AB_REPEAT=1 bash "$0" ab; stamp check ;;
    final)
      [ -x $B/bin/gdn ] || STAGES=build bash scripts/device_check.sh
      $B/bin/gdn bench --out "$OUT/final.json" > "$OUT/final.log" 2>&1; echo "bench rc=$?"
      timeout 240 python3 bench/peers.py --peers vllm_sigmoid,fla_recurrent --models qwen3-next-tp1 \
        --ours-json "$OUT/final.json" --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1; echo "peers rc=$?"
      tail -4 "$OUT/peers.log"; stamp final ;;
  esac
done
