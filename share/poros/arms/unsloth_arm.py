#!/usr/bin/env python3
"""Poros baseline arm "unsloth": Unsloth's FastLanguageModel (its patched
kernels) with LoRA, bf16 or NF4 (load_in_4bit); gradient checkpointing as the
cell's training.gradient_checkpointing says (Unsloth's own switch).

usage: unsloth_arm.py --cell CELL.json --out RUN_DIR

Prints one poros.summary/1 line on stdout; see armlib.py for the protocol.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import armlib  # noqa: E402


def run(torch, cell, source, out_dir, summary):
    # FastLanguageModel only loads from a checkpoint (and wants a tokenizer).
    ckpt, tmp = armlib.loader_checkpoint(torch, source, out_dir, cell["training"]["seed"])
    with armlib.removed_after(tmp):
        # Imported only now: unsloth patches transformers as it loads.
        from unsloth import FastLanguageModel

        lo, tr = cell["lora"], cell["training"]
        # Unsloth's get_peft_model sets checkpointing up itself (input grads
        # included), so not armlib.apply_checkpointing.  True, never
        # "unsloth": that variant also offloads activations to host memory,
        # which no other arm does.
        checkpointing = armlib.wants_checkpointing(cell)
        armlib.log_checkpointing(checkpointing, f"Unsloth use_gradient_checkpointing={checkpointing}")
        model, _tokenizer = FastLanguageModel.from_pretrained(
            model_name=ckpt, max_seq_length=tr["seq_len"], dtype=torch.bfloat16,
            load_in_4bit=cell["precision"] == "nf4", local_files_only=True)
        model = FastLanguageModel.get_peft_model(
            model, r=int(lo["rank"]), lora_alpha=float(lo["alpha"]), lora_dropout=float(lo["dropout"]),
            target_modules=list(lo["target_modules"]), bias="none", use_gradient_checkpointing=checkpointing,
            random_state=tr["seed"], max_seq_length=tr["seq_len"])
        armlib.train(torch, model, cell, out_dir, summary)
        armlib.save_adapter(model, out_dir, source)


if __name__ == "__main__":
    sys.exit(armlib.main("unsloth", ["transformers", "peft", "unsloth"], run))
