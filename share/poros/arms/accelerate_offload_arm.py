#!/usr/bin/env python3
"""Poros baseline arm "accelerate_offload": transformers with an Accelerate
device map that keeps what fits of the base model on the GPU (max_memory from
the cell's hardware.vram_gb) and offloads the rest to host memory, moving
each offloaded layer's weights to the GPU for its forward and backward.
LoRA on top with PEFT; the LoRA weights themselves stay on the GPU.

usage: accelerate_offload_arm.py --cell CELL.json --out RUN_DIR

Prints one poros.summary/1 line on stdout; see armlib.py for the protocol.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import armlib  # noqa: E402

# Activations, LoRA weights, their gradients and AdamW state, and the CUDA
# context need room beside the base weights: the device map gets the rest.
RESERVE_FRACTION, RESERVE_MIN_GIB = 0.2, 1.0


def host_available_gib():
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def max_memory(torch, cell):
    vram = float(cell["hardware"]["vram_gb"] or 0)
    if vram <= 0:  # the spec named no hardware (null): this device
        vram = torch.cuda.get_device_properties(0).total_memory / 2**30
    gpu = max(vram - max(RESERVE_MIN_GIB, RESERVE_FRACTION * vram), 0.1)
    host = max(host_available_gib() * 0.9, 1.0)
    armlib.log(f"device map budget: {gpu:.2f} GiB on the GPU for weights (of {vram:g}), {host:.0f} GiB on the host")
    return {0: f"{gpu:.2f}GiB", "cpu": f"{host:.0f}GiB"}


def synthetic_dispatched(torch, cell, source, budget):
    """Random weights (the seed) placed by Accelerate's own device map:
    built empty, each tensor drawn on the GPU and left where the map puts it,
    then dispatched with the same hooks from_pretrained(device_map=) uses."""
    import accelerate
    import transformers
    from accelerate.utils import set_module_tensor_to_device

    config = armlib.load_config(source)
    with accelerate.init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, **armlib.dtype_kwargs(torch))
    model.tie_weights()
    device_map = accelerate.infer_auto_device_map(model, max_memory=budget, dtype=torch.bfloat16,
                                                  no_split_module_classes=model._no_split_modules)
    std = float(getattr(config, "initializer_range", 0.02))
    gen = torch.Generator(device="cuda").manual_seed(cell["training"]["seed"])

    def place(name):
        best = ""
        for prefix in device_map:
            if (prefix == "" or name == prefix or name.startswith(prefix + ".")) and len(prefix) >= len(best):
                best = prefix
        return device_map[best]

    for name, p in list(model.named_parameters()):
        value = armlib.synthetic_tensor(torch, name, p.shape, std, gen)
        dev = place(name)
        set_module_tensor_to_device(model, name, "cpu" if dev == "cpu" else dev, value=value)
        del value
    model.tie_weights()
    left = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if left:
        raise RuntimeError(f"synthetic weights: {len(left)} tensors never placed (first {left[0]})")
    return accelerate.dispatch_model(model, device_map=device_map, main_device=0)


def load_model(torch, cell, source, out_dir):
    import transformers

    budget = max_memory(torch, cell)
    seed = cell["training"]["seed"]
    if cell["precision"] == "bf16" and source.checkpoint_dir is None:
        return synthetic_dispatched(torch, cell, source, budget), None
    ckpt, tmp = armlib.loader_checkpoint(torch, source, out_dir, seed)
    kw = dict(device_map="auto", max_memory=budget, local_files_only=True, **armlib.dtype_kwargs(torch))
    if cell["precision"] == "nf4":
        # bitsandbytes keeps what is offloaded unquantised (fp32) on the host.
        kw["quantization_config"] = armlib.bnb_config(torch, llm_int8_enable_fp32_cpu_offload=True)
    return transformers.AutoModelForCausalLM.from_pretrained(ckpt, **kw), tmp


def lora_to_gpu(torch, model):
    """PEFT puts a LoRA pair on its base layer's device, which for an
    offloaded layer is "meta" (Accelerate keeps the real weights in a host
    map and swaps them in per forward).  Trainable weights cannot live
    there: make them real, on the GPU, freshly initialised as PEFT does."""
    from peft.tuners.lora import LoraLayer

    moved = 0
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        for adapter in module.active_adapters:
            a, b = module.lora_A[adapter], module.lora_B[adapter]
            if a.weight.device.type == "cuda" and b.weight.device.type == "cuda":
                continue
            a.to_empty(device="cuda")
            b.to_empty(device="cuda")
            a.float()
            b.float()
            module.reset_lora_parameters(adapter, True)
            moved += 1
    bad = [n for n, p in model.named_parameters() if p.requires_grad and p.device.type != "cuda"]
    if bad:
        raise RuntimeError(f"{len(bad)} trainable tensors are not on the GPU (first {bad[0]})")
    return moved


def run(torch, cell, source, out_dir, summary):
    import peft

    model, tmp = load_model(torch, cell, source, out_dir)
    with armlib.removed_after(tmp):
        dm = getattr(model, "hf_device_map", {}) or {}
        offloaded = sum(1 for d in dm.values() if d in ("cpu", "disk"))
        armlib.log(f"device map: {len(dm)} entries, {offloaded} offloaded to the host")
        if "disk" in dm.values():
            raise RuntimeError("the device map spills to disk: not enough host memory for the offloaded weights")
        model.config.use_cache = False
        # On the dispatched base model, before LoRA wraps it; a recomputed
        # layer's forward goes through the offload hooks again.
        armlib.apply_checkpointing(model, cell)
        model = peft.get_peft_model(model, armlib.lora_config(cell))
        moved = lora_to_gpu(torch, model)
        if moved:
            armlib.log(f"{moved} LoRA pairs of offloaded layers placed on the GPU")
        armlib.train(torch, model, cell, out_dir, summary, input_device="cuda:0")
        armlib.save_adapter(model, out_dir, source)


if __name__ == "__main__":
    sys.exit(armlib.main("accelerate_offload", ["transformers", "peft", "accelerate"], run))
