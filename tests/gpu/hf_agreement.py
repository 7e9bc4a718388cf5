#!/usr/bin/env python3
"""Agreement with the world: poros-train's loss on fixed tokens against HF transformers'.

For each architecture (Qwen2, Qwen3, Llama) this saves a tiny random model with
transformers' save_pretrained (safetensors, bf16), loads it in poros-train (the
first step's loss is the base model's: LoRA B starts at zero), and compares with
transformers' own loss on the same tokens.  Needs torch + transformers; no network.

usage: hf_agreement.py [--poros-train PATH] [--backend cpu|cuda] [--workdir DIR]
Prints one JSON line per architecture; exit 1 if any differs by more than the
tolerance (bf16 weights and activations: 2e-2 relative on the loss).
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
SEQ = 48


def tiny_configs():
    common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                  max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
                  bos_token_id=1, eos_token_id=2,
                  initializer_range=0.08)  # large enough that logits are far from uniform
    yield "qwen2", transformers.Qwen2Config(**common, tie_word_embeddings=False)
    yield "qwen3", transformers.Qwen3Config(**common, head_dim=32, tie_word_embeddings=False)
    yield "llama", transformers.LlamaConfig(**common, tie_word_embeddings=True, attention_bias=False)


def hf_loss(model_dir, ids, device):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device)
    model.eval()
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    return float(out.loss)


def poros_loss(poros_train, model_dir, data_path, backend, out_dir):
    argv = [poros_train, "--model", model_dir, "--dataset", data_path, "--steps", "1",
            "--seq-len", str(SEQ), "--batch-size", "1", "--accum", "1", "--precision", "bf16",
            "--mode", "resident", "--backend", backend, "--warmup", "0", "--rank", "8",
            "--alpha", "16", "--dropout", "0", "--out", out_dir]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("poros-train failed: %s" % proc.stderr[-2000:])
    with open(os.path.join(out_dir, "events.jsonl")) as f:
        first = json.loads(f.readline())
    return float(first["loss"])


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--poros-train", default=os.path.join(here, "..", "..", "bin", "poros-train"))
    ap.add_argument("--backend", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = args.workdir or tempfile.mkdtemp(prefix="poros-hf-")
    torch.manual_seed(1234)
    failed = 0
    for name, cfg in tiny_configs():
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
        gen = torch.Generator().manual_seed(7)
        ids = torch.randint(0, cfg.vocab_size, (SEQ + 1,), generator=gen).tolist()
        data_path = os.path.join(work, name + ".jsonl")
        with open(data_path, "w") as f:
            f.write(json.dumps({"input_ids": ids}) + "\n")
        ref = hf_loss(model_dir, ids, device)
        got = poros_loss(args.poros_train, model_dir, data_path, args.backend,
                         os.path.join(work, name + "-run"))
        rel = abs(got - ref) / abs(ref)
        ok = rel <= REL_TOL
        failed += not ok
        print(json.dumps({"arch": name, "hf_loss": ref, "poros_loss": got, "rel_diff": rel,
                          "tolerance": REL_TOL, "backend": args.backend, "ok": ok,
                          "transformers": transformers.__version__}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
