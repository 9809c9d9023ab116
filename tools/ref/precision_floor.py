#!/usr/bin/env python3
"""How far transformers' own float32 logits are from float64 on the same checkpoint: the floor
below which no float32 engine can be compared. Prints, per model and prompt, the relative L2
error of the last logit row and the max |delta| of the top-5 logits at every position.

  python3 tools/ref/precision_floor.py tests/model/hf/*/
"""
import json
import os
import sys

import torch
import transformers


def main():
    torch.set_grad_enabled(False)
    for d in sys.argv[1:]:
        cfg = json.load(open(os.path.join(d, "config.json")))
        ref = json.load(open(os.path.join(d, "reference.json")))
        cls = getattr(transformers, cfg["architectures"][0])
        # transformers' default expert kernel (grouped_mm) has no float64 path: use the eager loop
        # for the float64 model, and report the float32 model with both.
        m32 = cls.from_pretrained(d, dtype=torch.float32).eval()
        m32e = cls.from_pretrained(d, dtype=torch.float32, experts_implementation="eager").eval()
        m64 = cls.from_pretrained(d, dtype=torch.float64, experts_implementation="eager").eval()
        for k, p in enumerate(ref["prompts"]):
            ids = torch.tensor([p["tokens"]])
            b = m64(ids).logits[0]
            top = torch.topk(b, 5, dim=-1).indices
            for label, m in (("f32 default", m32), ("f32 eager", m32e)):
                a = m(ids).logits[0].double()
                last = ((a[-1] - b[-1]).norm() / b[-1].norm()).item()
                d5 = (a.gather(1, top) - b.gather(1, top)).abs().max().item()
                stored = torch.tensor(p["top5_logits"], dtype=torch.float64)
                ds = (stored - b.gather(1, torch.tensor(p["top5_ids"]))).abs().max().item()
                print(f"{os.path.basename(d.rstrip('/'))} prompt {k} ({len(p['tokens'])} tok) {label} vs f64: last-row rel L2 {last:.3g}, top5 max|d| {d5:.3g}; stored ref vs f64 {ds:.3g}", flush=True)


if __name__ == "__main__":
    main()
