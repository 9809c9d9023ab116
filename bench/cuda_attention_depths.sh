#!/usr/bin/env bash
# Decode speed by cache depth for each form of the CUDA decode attention's walk: a split taken a
# position a warp at a time, or 8 positions a warp (docs/cuda.md, "attention"), switched by
# STRATA_CUDA_ATTN_OCTET_MIN (positions a split from which the 8-position walk runs; 10^9: never,
# 0: always). The alternating rounds and the table of medians are bench/cuda_ab.sh's: the
# threshold goes where the two walks cross.
#   bench/cuda_attention_depths.sh MODEL.gguf [build/bench/bench_model] [rounds] [settings] [depths]
# e.g. bench/cuda_attention_depths.sh q30.gguf build/bench/bench_model 2 "1000000000 48 32 16 0" "0 512 1024 2048 4096"
set -euo pipefail
M=${1:?model file}
B=${2:-build/bench/bench_model}
rounds=${3:-2}
settings=${4:-"1000000000 48 32 16 0"}
depths=${5:-"0 512 1024 2048 4096"}
envs=""
for s in $settings; do envs+="STRATA_CUDA_ATTN_OCTET_MIN=$s "; done
args=()
for d in $depths; do args+=("-p 16 -n 64 -d $d"); done
exec "$(dirname "$0")/cuda_ab.sh" "$M" "$B" "$rounds" "$envs" "${args[@]}"
