#!/usr/bin/env bash
# A/B of environment switches on bench_model's figures: every setting runs each argument set
# once per round, the rounds alternate, and the medians per (setting, arguments) come out as a
# table. A setting is one or more VAR=value pairs joined by commas ("-" for none); the figure is
# the aggregate t/s of a `-b N` run (N > 1), else its tg t/s, or with AB_FIGURE=pp its pp t/s.
#   bench/cuda_ab.sh MODEL.gguf BENCH ROUNDS "SETTING ..." "ARGS" ["ARGS" ...]
# e.g. bench/cuda_ab.sh q30.gguf build/bench/bench_model 2 \
#        "STRATA_CUDA_GEMV_STAGE=0 STRATA_CUDA_GEMV_STAGE=1" \
#        "-p 16 -n 64 -d 0" "-p 16 -n 32 -d 0 -b 2"
# (the knobs: docs/cuda.md, "Knobs")
set -euo pipefail
M=${1:?model file}
B=${2:?bench_model binary}
rounds=${3:?rounds}
settings=${4:?settings}
shift 4
[ $# -gt 0 ] || { echo "give at least one set of bench_model arguments" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for s in $settings; do
    env_args=()
    [ "$s" = "-" ] || IFS=',' read -r -a env_args <<<"$s"
    for a in "$@"; do
      # shellcheck disable=SC2086  # the argument set is split on purpose
      log=$(env "${env_args[@]}" "$B" -m "$M" --device cuda -r 2 $a 2>&1) || true
      if [ "${AB_FIGURE:-}" = pp ]; then
        tps=$(printf '%s\n' "$log" | sed -n 's/^pp[0-9]*: \([0-9.]*\) t\/s.*/\1/p' | tail -1)
      elif [[ " $a " =~ \ -b\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -gt 1 ]; then
        tps=$(printf '%s\n' "$log" | sed -n 's/^tg[0-9]* at batch [0-9]*: \([0-9.]*\) t\/s aggregate.*/\1/p' | tail -1)
      else
        tps=$(printf '%s\n' "$log" | sed -n 's/^tg[0-9]* @ d[0-9]*: \([0-9.]*\) t\/s.*/\1/p' | tail -1)
      fi
      [ -n "$tps" ] || { printf '%s\n' "$log" | tail -3 >&2; echo "no figure for setting $s, arguments $a" >&2; exit 1; }
      printf '%s\t%s\t%s\n' "$s" "$a" "$tps" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
settings = list(dict.fromkeys(r[0] for r in rows))
args = list(dict.fromkeys(r[1] for r in rows))
print("setting | " + " | ".join(args))
for s in settings:
    cells = []
    for a in args:
        v = [float(r[2]) for r in rows if r[0] == s and r[1] == a]
        cells.append(f"{statistics.median(v):.1f} ({' / '.join(f'{x:.1f}' for x in v)})")
    print(f"{s} | " + " | ".join(cells))
PY
