#!/usr/bin/env bash
# Decode speed by cache depth for each form of the CUDA decode attention's walk: a split taken a
# position a warp at a time, or 8 positions a warp (docs/cuda.md, "attention"), switched by
# STRATA_CUDA_ATTN_OCTET_MIN (positions a split from which the 8-position walk runs; 10^9: never,
# 0: always). Every setting runs once per round, the rounds alternate, and the medians per
# (setting, depth) come out as a table: the threshold goes where the two walks cross.
#   bench/cuda_attention_depths.sh MODEL.gguf [build/bench/bench_model] [rounds] [settings] [depths]
# e.g. bench/cuda_attention_depths.sh q30.gguf build/bench/bench_model 2 "1000000000 48 32 16 0" "0 512 1024 2048 4096"
set -euo pipefail
M=${1:?model file}
B=${2:-build/bench/bench_model}
rounds=${3:-2}
settings=${4:-"1000000000 48 32 16 0"}
depths=${5:-"0 512 1024 2048 4096"}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for s in $settings; do
    for d in $depths; do
      log=$(STRATA_CUDA_ATTN_OCTET_MIN=$s "$B" -m "$M" --device cuda -r 2 -p 16 -n 64 -d "$d" 2>&1) || true
      tps=$(printf '%s\n' "$log" | sed -n 's/^tg64 @ d[0-9]*: \([0-9.]*\) t\/s.*/\1/p' | tail -1)
      [ -n "$tps" ] || { printf '%s\n' "$log" | tail -3 >&2; echo "no tg64 figure for setting $s, depth $d" >&2; exit 1; }
      echo "$s $d $tps" >>"$out"
    done
  done
done
python3 - "$out" "$depths" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
depths = sys.argv[2].split()
settings = list(dict.fromkeys(r[0] for r in rows))
print("octet_min \\ depth | " + " | ".join(depths))
for s in settings:
    cells = []
    for d in depths:
        v = [float(r[2]) for r in rows if r[0] == s and r[1] == d]
        cells.append(f"{statistics.median(v):.1f} ({' / '.join(f'{x:.1f}' for x in v)})")
    print(f"{s} | " + " | ".join(cells))
PY
