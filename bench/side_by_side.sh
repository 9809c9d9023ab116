#!/bin/bash
# Strata against llama.cpp on the GPU machine, in one command (docs/BENCHMARKS.md quotes only
# ratios measured this way): makes the model files in /dev/shm, builds llama.cpp's llama-bench
# (and llama-batched-bench) from a source tarball meanwhile, then runs both engines on each file.
#   bench/side_by_side.sh STRATA_BIN_DIR LLAMA_TARBALL store24|store80|cpu16
# STRATA_BIN_DIR holds strata and bench_model; LLAMA_TARBALL is a `git archive` of llama.cpp's
# sources (CMakeLists.txt cmake ggml src include common tools vendor licenses app), built static,
# AVX-512 with GGML_NATIVE, AMX off, CUDA for sm_90 (store24) or none (cpu16; ~2 min on 16 cores).
#   store24  seed-125b IQ3_XXS at --vram-budget 22.5G (24 GiB peak) against --n-cpu-moe 32, the
#            in-place share swept (SWEEP=F,F,...), prefill's balance off and on (expert store,
#            issue #26); BATCH16=1 adds batch 16 to both
#   store80  the 80B-A3B geometry (qwen3next Q4_K_M) at 16G and 8G, llama.cpp at --n-cpu-moe N80 (34)
#   cpu16    the 30B-A3B geometry Q4_K_M at 16/8/4/2 threads and seed-125b at 16, CPU only
#            (issue #27), with Strata's per-op profile
set -u
bin=$1 tarball=$2 mode=$3
ts() { date -u +%H:%M:%S; }
# The peak GPU memory in use while a command runs (sampled every 0.5 s).
peak() {
  local f; f=$(mktemp)
  (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >>"$f"; sleep 0.5; done) &
  local p=$!
  "$@"
  kill $p
  echo "peak GPU memory: $(sort -n "$f" | tail -1) MiB"
}
build_llama() {  # $1: ON or OFF (CUDA)
  mkdir -p /tmp/llama && tar -xJf "$tarball" -C /tmp/llama &&
    cmake -S /tmp/llama -B /tmp/llama/build -DGGML_CUDA="$1" -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_APP=OFF \
      -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/tmp/llama-configure.log 2>&1 &&
    cmake --build /tmp/llama/build -j16 --target llama-bench ${LLAMA_EXTRA_TARGETS:-} >/tmp/llama-build.log 2>&1
  echo "llama.cpp built (rc $?) at $(ts)"
}
ll=/tmp/llama/build/bin
echo "start $(ts)"
case $mode in
  store24)
    # Fits one 10-minute device command: llama.cpp's build (~4.5 min) beside the file's making,
    # then each engine alone. With BATCH16=1 also batch 16 (`-b 16`, llama-batched-bench; ~2 min more).
    [ "${BATCH16:-0}" = 1 ] && export LLAMA_EXTRA_TARGETS=llama-batched-bench
    build_llama ON &
    "$bin/strata" make-model /dev/shm/seed.gguf --preset seed-125b --arch qwen35moe --type iq3_xxs --init blocks -t 16 2>&1 | tail -1
    wait
    echo "== Strata $(ts)"
    peak "$bin/bench_model" -m /dev/shm/seed.gguf --device cuda --vram-budget 22.5G -t 16 -p 512 -n 64 -r 3 -d 0 \
      $([ "${BATCH16:-0}" = 1 ] && echo "-b 16") --expert-far-sweep ${SWEEP:-0.3,0.2,-1} --prefill-balance-ab
    echo "== llama.cpp $(ts)"
    peak "$ll/llama-bench" -m /dev/shm/seed.gguf -ngl 99 --n-cpu-moe 32 -t 16 -fa 1 -p 512 -n 64 -r 3
    [ "${BATCH16:-0}" = 1 ] &&
      "$ll/llama-batched-bench" -m /dev/shm/seed.gguf -ngl 99 --n-cpu-moe 32 -t 16 -fa 1 -c 2048 -npp 16 -ntg 32 -npl 1,16
    ;;
  store80)
    # The 80B-A3B geometry (qwen3next, Q4_K_M) at 8 and 16 GiB: Strata at both, llama.cpp at the
    # --n-cpu-moe that fills about 16 GiB (N80, default 34).
    build_llama ON &
    "$bin/strata" make-model /dev/shm/m80.gguf --arch qwen3next --preset 80b-a3b --type q4_k_m --init blocks -t 16 2>&1 | tail -1
    wait
    for b in 16G 8G; do
      echo "== Strata --vram-budget $b $(ts)"
      peak "$bin/bench_model" -m /dev/shm/m80.gguf --device cuda --vram-budget $b -t 16 -p 512 -n 64 -r 3 -d 0
    done
    echo "== llama.cpp $(ts)"
    peak "$ll/llama-bench" -m /dev/shm/m80.gguf -ngl 99 --n-cpu-moe ${N80:-34} -t 16 -fa 1 -p 512 -n 64 -r 3
    rm -f /dev/shm/m80.gguf
    ;;
  cpu16)
    export CUDA_VISIBLE_DEVICES=  # else llama.cpp's CUDA build offloads prompt products even at -ngl 0
    build_llama OFF &
    "$bin/strata" make-model /dev/shm/m30.gguf --arch qwen3moe --preset 30b-a3b --type q4_k_m --init blocks -t 16 2>&1 | tail -1
    "$bin/strata" make-model /dev/shm/seed.gguf --preset seed-125b --arch qwen35moe --type iq3_xxs --init blocks -t 16 2>&1 | tail -1
    wait
    echo "== Strata, 30B-A3B $(ts)"
    for t in 16 8 4 2; do echo "-- $t threads"; "$bin/bench_model" -m /dev/shm/m30.gguf -t $t -p 128 -n 16 -r 2 2>&1 | grep -E "^pp|^tg|read"; done
    "$bin/bench_model" -m /dev/shm/m30.gguf -t 16 -p 512 -n 16 -r 2 2>&1 | grep -E "^pp"
    "$bin/bench_model" -m /dev/shm/m30.gguf -t 16 -p 128 -n 16 -r 1 --profile
    echo "== llama.cpp, 30B-A3B $(ts)"
    "$ll/llama-bench" -m /dev/shm/m30.gguf -ngl 0 -t 16,8,4,2 -p 128 -n 16 -r 2
    "$ll/llama-bench" -m /dev/shm/m30.gguf -ngl 0 -t 16 -p 512 -n 0 -r 2
    echo "== seed-125b, 16 threads $(ts)"
    "$bin/bench_model" -m /dev/shm/seed.gguf -t 16 -p 64 -n 16 -r 2 2>&1 | grep -E "^pp|^tg|read"
    "$ll/llama-bench" -m /dev/shm/seed.gguf -ngl 0 -t 16 -p 64 -n 16 -r 2
    ;;
  *) echo "side_by_side.sh: unknown mode '$mode' (store24, store80 or cpu16)" >&2; exit 2 ;;
esac
rm -f /dev/shm/seed.gguf /dev/shm/m30.gguf
echo "end $(ts)"
