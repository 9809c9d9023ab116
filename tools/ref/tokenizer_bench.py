#!/usr/bin/env python3
"""Times Hugging Face `tokenizers` (Rust, through Python) on a text file, for docs/BENCHMARKS.md.

  python3 tools/ref/tokenizer_bench.py TOKENIZER_JSON FILE [--runs N]

Prints the median time of Tokenizer.encode(whole text, add_special_tokens=False) on one thread
(RAYON_NUM_THREADS=1 is set before the import), the ids count, and encode_batch over the text's
lines for comparison. Model load is outside the timing.
"""
import os
import statistics
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402


def main():
    args = sys.argv[1:]
    runs = 9
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i:i + 2]
    tok_json, path = args
    tok = tokenizers.Tokenizer.from_file(tok_json)
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    n = len(tok.encode(text, add_special_tokens=False).ids)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        tok.encode(text, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"tokenizers {tokenizers.__version__}: {len(text.encode())/1e6:.2f} MB, {n} tokens; "
          f"encode (1 thread) {t*1e3:.1f} ms = {n/t/1e6:.2f} M tokens/s")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        tok.encode_batch(lines, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"encode_batch over {len(lines)} lines (RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}): "
          f"{t*1e3:.1f} ms = {n/t/1e6:.2f} M tokens/s (line ids, roughly the same count)")


if __name__ == "__main__":
    main()
