#!/usr/bin/env python3
"""An embed lane's throughput: `strata serve` answering POST /v1/embeddings with the gateway's
own call shape (64 passages a call, ~280 bytes of real text each: about the 71 tokens a chunk of
the 1M-token paste averages), passages/s over several calls. Python's standard library only, so
it runs where node does not (the GPU machine).

  python3 bench/bench_embed_lane.py STRATA MODEL [--device cuda|cpu] [--threads N] [--calls 20]

Text: Python's own installed library sources (real, varied text). Prints one line per call and
the median rate; the first call (warm-up) is not counted.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request


def passages(n, size=280):
    out = []
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))):
        text = open(path, encoding="utf-8", errors="replace").read()
        for i in range(0, len(text) - size, size):
            out.append(text[i:i + size])
            if len(out) == n:
                return out
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--port", type=int, default=18931)
    args = ap.parse_args()
    texts = passages(64 * (args.calls + 1))
    proc = subprocess.Popen([args.strata, "serve", "-m", args.model, "--device", args.device, "-t", str(args.threads),
                             "--port", str(args.port), "--parallel", "64"], stdout=subprocess.DEVNULL, stderr=open(f"/tmp/embed_lane_{args.port}.log", "w"))
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        rates = []
        for c in range(args.calls + 1):
            body = json.dumps({"model": "m", "input": texts[64 * c:64 * (c + 1)]}).encode()
            req = urllib.request.Request(url + "/v1/embeddings", body, {"Content-Type": "application/json"})
            t0 = time.perf_counter()
            res = json.load(urllib.request.urlopen(req, timeout=600))
            dt = time.perf_counter() - t0
            tokens = res["usage"]["prompt_tokens"]
            if c > 0:
                rates.append(64 / dt)
            print(f"call {c}: 64 passages, {tokens} tokens, {1e3 * dt:.1f} ms", flush=True)
        print(f"{args.device} x{args.threads}: median {statistics.median(rates):.1f} passages/s "
              f"({statistics.median(rates) * tokens / 64:.0f} tokens/s)", flush=True)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
