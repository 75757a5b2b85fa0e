#!/usr/bin/env bash
set -uo pipefail
build() { local c=$1 flags="" tag=default
  if [ "$c" != "-" ]; then for kv in ${c//,/ }; do flags="$flags -DGDN_$kv"; done; tag=$(echo "$c" | tr ',=' '_-'); fi
  B=build-sw-$tag
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$flags" > /dev/null 2>&1
  cmake --build $B -j 16 --target gdn_cli > $OUT/build-$tag.log 2>&1 || { echo "build $c failed"; grep error $OUT/build-$tag.log | head -5; return 1; }
}
build TMA_PROFILE=1 && for st in f32 bf16; do echo "== profile $st"; timeout 60 $B/bin/gdn bench --models qwen3-next-tp1 --n 64 --t 1 --state $st --ops recurrent --out /tmp/x.json > $OUT/prof-$st.log 2>&1; grep -v tma-prof $OUT/prof-$st.log | grep recurrent; grep tma-prof $OUT/prof-$st.log | sort -t' ' -k5n | awk '{print}' | head -12; done
for c in - TMA_CONSUMERS=3,TMA_SMEM_KB=54,TMA_MB=4; do build $c && { echo "== $c"; timeout 90 $B/bin/gdn bench --models qwen3-next-tp1 --n 64,256 --t 1,4 --ops recurrent --out $OUT/sw-$(echo $c | tr ',=' '_-').json | grep recurrent; }; done
