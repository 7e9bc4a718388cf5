#!/usr/bin/env python3
"""Agreement with the world: poros-train's loss on fixed tokens against HF transformers'.

For each architecture (Qwen2, Qwen3, Llama, Llama with llama3 RoPE scaling)
this saves a tiny random model with the installed transformers' save_pretrained
(safetensors, bf16; transformers 5 writes "rope_parameters", 4 "rope_theta"),
loads it in poros-train (the first step's loss is the base model's: LoRA B
starts at zero), and compares with transformers' own loss on the same tokens,
in bf16 and in fp32 (the same bf16 weights, upcast).  rope_theta is 1e6 (5e5
for Llama) and initializer_range 0.15, so attention is far from uniform and a
RoPE read wrong (a defaulted theta, a dropped scaling) shows in the loss.
Needs torch + transformers; no network.

usage: hf_agreement.py [--poros-train PATH] [--backend cpu|cuda] [--workdir DIR] [--seed N]
                       [--seq N] [--only NAME,...]
Two more architectures, run only when --only names them, have head dims
128 and 64 (qwen2_d128, llama_d64):
on CUDA those take the cuDNN attention route for a row of one document
(POROS_ATTENTION=mma in the environment forces Poros' own kernels), so
`--seq 2048 --only qwen2_d128,llama_d64` checks that route at length.
--seed N draws other weights and tokens (default: the fixed pair 1234, 7), to
tell a formula error (every seed) from one bf16 sample (one seed).
Prints one JSON line per architecture; exit 1 if any is off: poros more than
2e-2 relative from transformers bf16, or farther from transformers fp32 than
FP32_FACTOR times transformers bf16's own distance to it (plus a 1e-3 floor).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

REL_TOL = 2e-2
FP32_FACTOR = 3.0
FP32_FLOOR = 1e-3
SEQ = 48
WIDE = ("qwen2_d128", "llama_d64")  # only when named: their 48-token sample is not the point
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5


def rope_kwargs(theta, scaling=None):
    """RoPE settings as the installed transformers takes them."""
    if TRANSFORMERS_5:
        params = dict(scaling or {"rope_type": "default"})
        params["rope_theta"] = theta
        return {"rope_parameters": params}
    return {"rope_theta": theta, "rope_scaling": scaling}


def tiny_configs(seq):
    common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                  max_position_embeddings=max(256, seq + 1), rms_norm_eps=1e-6,
                  bos_token_id=1, eos_token_id=2,
                  initializer_range=0.15)  # attention far from uniform: RoPE cannot hide
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    yield "qwen2", transformers.Qwen2Config(**common, **rope_kwargs(1e6), tie_word_embeddings=False)
    yield "qwen3", transformers.Qwen3Config(**common, **rope_kwargs(1e6), head_dim=32, tie_word_embeddings=False)
    yield "llama", transformers.LlamaConfig(**common, **rope_kwargs(5e5), tie_word_embeddings=True,
                                            attention_bias=False)
    yield "llama3_rope", transformers.LlamaConfig(**common, **rope_kwargs(5e5, llama3), tie_word_embeddings=False,
                                                  attention_bias=False)
    wide = dict(common, hidden_size=512, intermediate_size=512)  # head dim 128
    yield "qwen2_d128", transformers.Qwen2Config(**wide, **rope_kwargs(1e6), tie_word_embeddings=False)
    yield "llama_d64", transformers.LlamaConfig(**dict(common, hidden_size=256), **rope_kwargs(5e5),
                                                tie_word_embeddings=False, attention_bias=False)  # head dim 64


def hf_loss(model_dir, ids, device, dtype=torch.bfloat16):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    model.eval()
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    return float(out.loss)


def poros_loss(poros_train, model_dir, data_path, backend, out_dir, seq):
    argv = [poros_train, "--model", model_dir, "--dataset", data_path, "--steps", "1",
            "--seq-len", str(seq), "--batch-size", "1", "--accum", "1", "--precision", "bf16",
            "--mode", "resident", "--backend", backend, "--timing-warmup", "0", "--rank", "8",
            "--alpha", "16", "--dropout", "0", "--out", out_dir]
    env = dict(os.environ, POROS_CUDNN_VERBOSE="1")  # says which attention route ran
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError("poros-train failed: %s" % proc.stderr[-2000:])
    with open(os.path.join(out_dir, "events.jsonl")) as f:
        first = json.loads(f.readline())
    route = "cudnn" if "cudnn forward: engine" in proc.stderr else "kernels"
    return float(first["loss"]), route


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--poros-train", default=os.path.join(here, "..", "..", "bin", "poros-train"))
    ap.add_argument("--backend", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--only", default=None, help="comma-separated architecture names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = args.workdir or tempfile.mkdtemp(prefix="poros-hf-")
    torch.manual_seed(1234 if args.seed is None else args.seed)
    failed = 0
    for name, cfg in tiny_configs(args.seq):
        if (only is None and name in WIDE) or (only is not None and name not in only):
            continue
        model_dir = os.path.join(work, name)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        # Non-trivial norm weights, so a wrong norm would show.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.uniform_(0.5, 1.5)
                elif "bias" in n:
                    p.normal_(0.0, 0.02)
        model.save_pretrained(model_dir, safe_serialization=True)
        gen = torch.Generator().manual_seed(7 if args.seed is None else args.seed + 7)
        ids = torch.randint(0, cfg.vocab_size, (args.seq + 1,), generator=gen).tolist()
        data_path = os.path.join(work, name + ".jsonl")
        with open(data_path, "w") as f:
            f.write(json.dumps({"input_ids": ids}) + "\n")
        with open(os.path.join(model_dir, "config.json")) as f:
            saved = json.load(f)
        style = "rope_parameters" if "rope_parameters" in saved else "rope_theta"
        ref = hf_loss(model_dir, ids, device)
        ref32 = hf_loss(model_dir, ids, device, torch.float32)
        try:
            got, route = poros_loss(args.poros_train, model_dir, data_path, args.backend,
                             os.path.join(work, name + "-run"), args.seq)
        except RuntimeError as e:
            failed += 1
            print(json.dumps({"arch": name, "config_style": style, "ok": False, "error": str(e),
                              "transformers": transformers.__version__}), flush=True)
            continue
        rel = abs(got - ref) / abs(ref)
        poros_vs_fp32 = abs(got - ref32) / abs(ref32)
        hf_bf16_vs_fp32 = abs(ref - ref32) / abs(ref32)
        ok = rel <= REL_TOL and poros_vs_fp32 <= FP32_FACTOR * hf_bf16_vs_fp32 + FP32_FLOOR
        failed += not ok
        print(json.dumps({"arch": name, "config_style": style, "hf_loss": ref, "hf_fp32_loss": ref32,
                          "poros_loss": got, "rel_diff": rel, "poros_vs_fp32": poros_vs_fp32,
                          "hf_bf16_vs_fp32": hf_bf16_vs_fp32, "tolerance": REL_TOL, "backend": args.backend,
                          "seq": args.seq, "attention": route,
                          "ok": ok, "seed": args.seed, "transformers": transformers.__version__}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
