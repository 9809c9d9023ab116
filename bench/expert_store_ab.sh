#!/bin/bash
# The expert store's decode join, A/B on a GPU machine: the host share of a decode step joined by a
# host callback (STRATA_CUDA_HOST_LINK=0) and by the mapped link (1, the default), each in its own
# process on the same file, the share of missing experts read in place swept in each.
#   bench/expert_store_ab.sh BIN_DIR MODEL [bench_model flags...]
# e.g. bench/expert_store_ab.sh build/bench /dev/shm/seed12.gguf --experts on --expert-slots 160
# with MODEL from `strata make-model MODEL --preset seed-125b --arch qwen35moe --layers 12 --type iq3_xxs
# --init blocks -t 16` (the seed's layer shapes; 160 of 512 slots a layer is its share at 24 GiB).
set -u
bin=$1 model=$2
shift 2
for link in 0 1 0 1; do
  echo "### STRATA_CUDA_HOST_LINK=$link"
  STRATA_CUDA_HOST_LINK=$link "$bin/bench_model" -m "$model" --device cuda -t 16 -p 512 -n 64 -r 2 -d 0 \
    --expert-far-sweep 1,0.7,0.5,0.3,-1 "$@" 2>&1 | grep -E "^pp|^tg|expert-far|decode with"
done
