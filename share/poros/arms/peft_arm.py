#!/usr/bin/env python3
"""Poros baseline arm "peft": Hugging Face transformers + PEFT LoRA, the whole
model resident on the GPU (bf16, or NF4 through bitsandbytes: QLoRA).

usage: peft_arm.py --cell CELL.json --out RUN_DIR

Prints one poros.summary/1 line on stdout; see armlib.py for the protocol.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import armlib  # noqa: E402


def load_model(torch, cell, source, out_dir):
    """The base model on device 0; returns (model, temporary checkpoint or None)."""
    import transformers

    seed = cell["training"]["seed"]
    if cell["precision"] == "bf16" and source.checkpoint_dir is None:
        return armlib.synthetic_model_on_device(torch, armlib.load_config(source), seed), None
    # bitsandbytes quantises while loading a checkpoint: give it one.
    ckpt, tmp = armlib.loader_checkpoint(torch, source, out_dir, seed)
    kw = dict(device_map={"": 0}, local_files_only=True, **armlib.dtype_kwargs(torch))
    if cell["precision"] == "nf4":
        kw["quantization_config"] = armlib.bnb_config(torch)
    return transformers.AutoModelForCausalLM.from_pretrained(ckpt, **kw), tmp


def run(torch, cell, source, out_dir, summary):
    import peft

    model, tmp = load_model(torch, cell, source, out_dir)
    with armlib.removed_after(tmp):
        model.config.use_cache = False
        # Not prepare_model_for_kbit_training: it would upcast the unquantised
        # weights to fp32 (which Poros does not do) and turn on gradient
        # checkpointing whatever the cell says.  Checkpointing goes on (or
        # stays off) here, on the base model, before LoRA wraps it.
        armlib.apply_checkpointing(model, cell)
        model = peft.get_peft_model(model, armlib.lora_config(cell))
        armlib.train(torch, model, cell, out_dir, summary)
        armlib.save_adapter(model, out_dir, source)


if __name__ == "__main__":
    sys.exit(armlib.main("peft", ["transformers", "peft"], run))
