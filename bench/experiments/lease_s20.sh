#!/usr/bin/env bash
# The measurements prepared in the twentieth session (bench/experiments/README.md), for one lease on
# the GPU machine, from the repository root: OUT=<dir> bash bench/experiments/lease_s20.sh [STAGES]
#   tests:  build-dev (gdn_cli + gdn_tests), the lean step's tests, the "leanstep:" ctest pass, and
#           memcheck of the lean step's, the hostile and the golden attention tests with it on
#   step:   gdn_attention's two-launch form on the lean kernel (GDN_CUDA_LEAN_STEP=1) against the
#           default fused step on one binary, two rounds (bench/compare.py --ratio)
#   mb:     two builds of the lean kernel's resident-block knobs against build-dev, two rounds
#   ncu:    (not in the default list) ncu sections of the lean step's kernel and of the lean recurrence
# Default STAGES: "tests step mb" (one call of at most 10 minutes may not hold all three: run
# "tests step" and then "mb"; the builds are kept between calls of one lease). Results go to $OUT.
set -uo pipefail
OUT=${OUT:-lease-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
STAGES=${1:-"tests step mb"}
cfg() { cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$2" \
          > "$OUT/cfg-$(basename "$1").log" 2>&1; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
MODELS=qwen3-next-tp1,qwen3-next-tp4,qwen3.6-27b
cfg build-dev ""
if [[ " $STAGES " == *" mb "* ]]; then  # the variants build beside build-dev (gdn_cli only)
  cfg /tmp/bA "-DGDN_REC_LEAN_MB_SPEC=24 -DGDN_REC_LEAN_MB_16_SPEC=24 -DGDN_REC_LEAN_MB_16=20" &
  cfg /tmp/bB "-DGDN_REC_LEAN_MB_SPEC=28 -DGDN_REC_LEAN_MB_16_SPEC=20 -DGDN_REC_LEAN_MB_16=16" &
  wait
  (cmake --build /tmp/bA -j 5 --target gdn_cli > "$OUT/build-bA.log" 2>&1 || echo "BUILD FAILED: bA") &
  (cmake --build /tmp/bB -j 5 --target gdn_cli > "$OUT/build-bB.log" 2>&1 || echo "BUILD FAILED: bB") &
fi
cmake --build build-dev -j 6 --target gdn_cli gdn_tests > "$OUT/build-dev.log" 2>&1 || { echo "BUILD FAILED: build-dev"; tail -30 "$OUT/build-dev.log"; }
wait
stamp "built"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for s in $STAGES; do
  case $s in
    tests)
      build-dev/bin/gdn_tests --gtest_filter='*LeanStep*' > "$OUT/leanstep_gtest.log" 2>&1; echo "LeanStep rc=$?"
      grep -E "PASSED|FAILED|Failure" "$OUT/leanstep_gtest.log" | head -20
      (cd build-dev && ctest -j 8 --timeout 120 -R '^leanstep:' > "$OUT/ctest_leanstep.log" 2>&1); echo "ctest leanstep: rc=$?"
      grep -E "tests passed|tests failed|\(Failed|\(Timeout|\(SEGFAULT|\(Exception" "$OUT/ctest_leanstep.log" | head -20
      GDN_CUDA_LEAN_STEP=1 timeout 180 compute-sanitizer --tool memcheck --print-limit 20 build-dev/bin/gdn_tests \
        --gtest_filter='*LeanStep*:*HostileAttention*cuda*:Golden*ttention*cuda*' > "$OUT/leanstep_memcheck.log" 2>&1
      echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/leanstep_memcheck.log" | head -5
      stamp "tests" ;;
    step)
      S="--models $MODELS --n 1,8,64,256 --t 1,4 --state f32,bf16 --ops recurrent,fused"
      for r in 1 2; do
        timeout 240 build-dev/bin/gdn bench $S --out "$OUT/step-default-$r.json" > "$OUT/step-default-$r.log" 2>&1
        echo "default round $r rc=$?"
        GDN_CUDA_LEAN_STEP=1 timeout 240 build-dev/bin/gdn bench $S --out "$OUT/step-lean-$r.json" > "$OUT/step-lean-$r.log" 2>&1
        echo "lean step round $r rc=$?"
      done
      python3 bench/compare.py default="$OUT/step-default-1.json,$OUT/step-default-2.json" \
        leanstep="$OUT/step-lean-1.json,$OUT/step-lean-2.json" --ops fused --ratio > "$OUT/s100_lean_step.md"
      grep -E "tp1 \| (1|8|64|256) \| (1|4) \|" "$OUT/s100_lean_step.md" | head -20
      stamp "step" ;;
    mb)
      S="--models $MODELS --n 1,4,16,64,256 --t 1,3,4 --state f32,bf16 --ops recurrent"
      for r in 1 2; do
        for b in build-dev /tmp/bA /tmp/bB; do
          n=$(basename $b)
          timeout 200 $b/bin/gdn bench $S --out "$OUT/mb-$n-$r.json" > "$OUT/mb-$n-$r.log" 2>&1; echo "mb $n round $r rc=$?"
        done
      done
      python3 bench/compare.py main="$OUT/mb-build-dev-1.json,$OUT/mb-build-dev-2.json" \
        A="$OUT/mb-bA-1.json,$OUT/mb-bA-2.json" B="$OUT/mb-bB-1.json,$OUT/mb-bB-2.json" > "$OUT/s100_mb.md"
      grep -E "tp1 \| (1|64|256) \|" "$OUT/s100_mb.md" | head -20
      stamp "mb" ;;
    ncu)  # if the lean step misses its prediction: where its kernel spends the time (TP1 N = 64 f32 decode),
          # beside the lean recurrence alone (the primitive op's kernel, same batch)
      for op in fused recurrent; do
        GDN_CUDA_LEAN_STEP=1 timeout 200 ncu --kernel-name "regex:recurrent_lean_kernel" --launch-skip 3 --launch-count 1 \
          --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
          build-dev/bin/gdn bench --models qwen3-next-tp1 --n 64 --t 1 --state f32 --ops $op > "$OUT/ncu_lean_$op.log" 2>&1
        echo "ncu $op rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Stall" "$OUT/ncu_lean_$op.log" | head -12
      done
      stamp "ncu" ;;
  esac
done
