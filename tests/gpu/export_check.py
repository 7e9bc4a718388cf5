#!/usr/bin/env python3
"""poros-export against the world: the merged checkpoint in transformers vs
PEFT's base + adapter vs fp32 truth, on one batch.

For Llama (tied embeddings) and Qwen2 (q/k/v biases) this saves a tiny random
model with transformers (initializer_range 0.15, bf16, sharded so the index is
read), makes three adapters: a random non-zero PEFT one (init_lora_weights=False),
the same with use_rslora, and one trained by poros-train (CUDA, 20 steps on a
repeating pattern, so that it moves the loss well past the bar), and
exports each with poros-export.  Then, on one batch of random tokens:

  truth        base fp32 + PEFT adapter fp32, unmerged (TF32 off)
  peft_bf16    base bf16 + PEFT adapter (PEFT's own mixed precision)
  merged_bf16  the export loaded by transformers in bf16
  merged_fp32  the export loaded in fp32 (only W' storage rounding differs)
  base_*       the base alone in bf16 and fp32: |base_bf16 - base_fp32| is
               the bf16 noise floor of this model and batch

and weight by weight: the export against torch's bf16(W + scale * B @ A) in
fp32 (ulps and how many differ; only the GEMM's summation order may flip a
rounding), and against PEFT's merge_and_unload() of the bf16 base.

usage: export_check.py [--bindir DIR] [--workdir DIR] [--json FILE]
Prints one JSON line per (arch, adapter); exit 1 when a check fails:
  weights   every merged element the bf16 rounding of a value within the fp32
            summation-order error bound of torch's W + scale * B @ A, and at
            most 0.1% of them differ from torch's at all
  loss      |merged_bf16 - truth| <= bar = 3 * max(noise floor, |peft_bf16 - truth|, 1e-3)
  adapter   |truth - base_fp32| > bar (the adapter moves the loss more than that)

Measured on an H200 (torch 2.11, transformers 5.17, peft 0.21), with an
earlier version of these checks (weights: at most 1 ulp; adapter: 10/3 bar;
poros-train 3 steps at lr 1e-2):
  loss, merged_bf16 - truth:   +0.0088 +0.0097 -0.0006 (llama)  +0.0044 +0.0094 -0.0107 (qwen2)
        peft_bf16 - truth:     +0.0006 +0.0217 -0.0092          +0.0064 +0.0046 +0.0056
        merged_fp32 - truth:   +0.0019 +0.0016 +0.0039          -0.0004 -0.0056 -0.0020
  bf16 noise floor |base_bf16 - base_fp32|: 0.0078 (llama), 0.0021 (qwen2); losses ~9.7-10.0
  adapter effect: -0.136 +0.188 +0.016 (llama), -0.222 +0.066 -0.052 (qwen2)
  weights differing from torch's fp32 merge: 61, 106, 7 of 2359296 (llama), 33, 95, 7 of
  2228224 (qwen2), the same elements as PEFT's merge_and_unload() (which is torch's);
  up to 16 ulps, where W' is near zero.
The loss check passed everywhere; "weights" failed the 1-ulp bar (hence the
error bound above), "adapter" the 10/3 bar for the small poros-trained adapters.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
import peft  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BATCH, SEQ = 4, 128


def configs():
    common = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                  vocab_size=1024, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
                  bos_token_id=1, eos_token_id=2, initializer_range=0.15)
    yield "llama", transformers.LlamaConfig(**common, num_key_value_heads=4, tie_word_embeddings=True)
    yield "qwen2", transformers.Qwen2Config(**common, num_key_value_heads=2, tie_word_embeddings=False)


def load(path, dtype, device):
    m = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    m.eval()
    return m


def loss_of(model, ids):
    model.eval()  # LoRA dropout modules PEFT adds start in training mode
    with torch.no_grad():
        return float(model(input_ids=ids, labels=ids).loss)


def read_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


def ulps(a, b):
    """|a - b| in bf16 ulps (same-sign values; the sign-magnitude bits as integers)."""
    def key(x):
        i = x.view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -(i & 0x7FFF), i)
    return (key(a) - key(b)).abs()


def weight_check(merged_dir, base_dir, adapter_dir, scale, device):
    got, base = read_dir(merged_dir), read_dir(base_dir)
    lora = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    n_el = n_diff = max_ulp = n_outside = 0
    for key, w in base.items():
        stem = key[:-len(".weight")]
        a_key = "base_model.model." + stem + ".lora_A.weight"
        if a_key not in lora:
            if not torch.equal(got[key].view(torch.int16), w.to(torch.bfloat16).view(torch.int16)):
                raise RuntimeError("%s: an unmerged tensor is not byte-identical" % key)
            continue
        a = lora[a_key].float().to(device)
        b = lora["base_model.model." + stem + ".lora_B.weight"].float().to(device)
        w32 = w.float().to(device)
        ref32 = w32 + scale * (b @ a)
        ref = ref32.to(torch.bfloat16)
        mine = got[key].to(device)
        u = ulps(mine, ref)
        n_el += u.numel()
        n_diff += int((u > 0).sum())
        max_ulp = max(max_ulp, int(u.max()))
        # Two fp32 evaluations in different summation orders differ by at most
        # 2 (R 2^-24 scale sum|B||A| + 2^-24 (|W| + |delta|)) < 2^-19 (|W| + scale |B| @ |A|)
        # for R = 8: the export must be the bf16 rounding of a value that close to
        # torch's (near W' = 0 that can be several bf16 ulps: a tiny result has tiny ulps).
        bound = 2.0 ** -19 * (w32.abs() + scale * (b.abs() @ a.abs()))
        lo, hi = (ref32 - bound).to(torch.bfloat16).float(), (ref32 + bound).to(torch.bfloat16).float()
        n_outside += int(((mine.float() < lo) | (mine.float() > hi)).sum())
    return n_el, n_diff, max_ulp, n_outside


def check_arch(arch, cfg, bindir, work, device, backend, results):
    torch.manual_seed(20)
    base_dir = os.path.join(work, arch, "base")
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
            if n.endswith(".bias"):
                p.normal_(0.0, 0.05)
    model.to(torch.bfloat16).save_pretrained(base_dir, max_shard_size="1MB")
    del model

    adapters = {}
    for name, rslora in (("peft_random", False), ("peft_rslora", True)):
        d = os.path.join(work, arch, name)
        m = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        lc = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=MODULES,
                             init_lora_weights=False, use_rslora=rslora, task_type="CAUSAL_LM")
        pm = peft.get_peft_model(m, lc)
        pm.save_pretrained(d)
        adapters[name] = (d, 16 / (8 ** 0.5) if rslora else 2.0)
        del pm, m
    run_dir = os.path.join(work, arch, "poros_run")
    proc = subprocess.run([os.path.join(bindir, "poros-train"), "--model", base_dir, "--backend", backend,
                           "--precision", "bf16", "--steps", "20", "--lr", "5e-2", "--seq-len", str(SEQ),
                           "--dataset", "synthetic:repeat",
                           "--rank", "8", "--alpha", "16", "--quiet", "--out", run_dir],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("poros-train failed: " + proc.stderr[-2000:])
    adapters["poros_trained"] = (os.path.join(run_dir, "adapter"), 2.0)

    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(7)).to(device)
    base_bf16 = loss_of(load(base_dir, torch.bfloat16, device), ids)
    base_fp32 = loss_of(load(base_dir, torch.float32, device), ids)
    floor = abs(base_bf16 - base_fp32)
    for name, (adapter_dir, scale) in adapters.items():
        try:
            merged_dir = os.path.join(work, arch, name + "_merged")
            proc = subprocess.run([os.path.join(bindir, "poros-export"), "--base", base_dir, "--adapter",
                                   adapter_dir, "--out", merged_dir, "--max-shard-size", "2MB"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError("poros-export failed: " + proc.stderr[-2000:])
            summary = json.loads(proc.stdout)
            with open(os.path.join(merged_dir, "config.json")) as f:
                mcfg = json.load(f)
            truth = loss_of(peft.PeftModel.from_pretrained(load(base_dir, torch.float32, device), adapter_dir), ids)
            pb = peft.PeftModel.from_pretrained(load(base_dir, torch.bfloat16, device), adapter_dir)
            peft_bf16 = loss_of(pb, ids)
            merged_bf16 = loss_of(load(merged_dir, torch.bfloat16, device), ids)
            merged_fp32 = loss_of(load(merged_dir, torch.float32, device), ids)
            # PEFT's own merge of the bf16 base, weight by weight against ours
            pm = pb.merge_and_unload()
            ours = read_dir(merged_dir)
            pd = {k: v for k, v in pm.state_dict().items() if k in ours}
            peft_diff = sum(int((ulps(ours[k].to(device), v.to(torch.bfloat16)) > 0).sum()) for k, v in pd.items())
            peft_max = max(int(ulps(ours[k].to(device), v.to(torch.bfloat16)).max()) for k, v in pd.items())
            n_el, n_diff, max_ulp, n_outside = weight_check(merged_dir, base_dir, adapter_dir, scale, device)
            bar = 3 * max(floor, abs(peft_bf16 - truth), 1e-3)
            checks = {
                "weights": n_outside == 0 and n_diff <= n_el * 1e-3,
                "loss": abs(merged_bf16 - truth) <= bar,
                "adapter": abs(truth - base_fp32) > bar,
                "config": mcfg.get("dtype") == "bfloat16" and summary["merged"] == 7 * cfg.num_hidden_layers,
            }
            r = {"arch": arch, "adapter": name, "scale": summary["scale"], "shards": summary["shards"],
                 "loss_truth_fp32": truth, "loss_peft_bf16": peft_bf16, "loss_merged_bf16": merged_bf16,
                 "loss_merged_fp32": merged_fp32, "loss_base_bf16": base_bf16, "loss_base_fp32": base_fp32,
                 "bf16_noise_floor": floor, "merged_bf16_vs_truth": merged_bf16 - truth,
                 "peft_bf16_vs_truth": peft_bf16 - truth, "merged_fp32_vs_truth": merged_fp32 - truth,
                 "merged_vs_peft_bf16": merged_bf16 - peft_bf16, "adapter_effect": truth - base_fp32,
                 "weights_elements": n_el, "weights_differing_vs_torch": n_diff, "weights_max_ulp_vs_torch": max_ulp,
                 "weights_outside_fp32_bound": n_outside,
                 "weights_differing_vs_peft_merge": peft_diff, "weights_max_ulp_vs_peft_merge": peft_max,
                 "checks": checks, "ok": all(checks.values())}
            results.append(r)
            print(json.dumps(r), flush=True)
            del pb, pm
        except Exception:  # the next adapter's numbers are still wanted
            r = {"arch": arch, "adapter": name, "error": traceback.format_exc()[-3000:], "ok": False}
            results.append(r)
            print(json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bindir", default=os.path.join(here, "..", "..", "bin"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "cuda" if device == "cuda" else "cpu"
    work = args.workdir or tempfile.mkdtemp(prefix="poros-export-")
    results = []
    for arch, cfg in configs():
        try:
            check_arch(arch, cfg, args.bindir, work, device, backend, results)
        except Exception:  # one architecture's failure must not hide the other's numbers
            r = {"arch": arch, "error": traceback.format_exc()[-3000:], "ok": False}
            results.append(r)
            print(json.dumps(r), flush=True)
    failed = sum(1 for r in results if not r["ok"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("export_check: %d of %d passed (torch %s, transformers %s, peft %s)"
          % (len(results) - failed, len(results), torch.__version__, transformers.__version__, peft.__version__),
          file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
