"""What the Poros baseline arms share.

Each arm (peft_arm.py, unsloth_arm.py, accelerate_offload_arm.py) is run by
poros-arm as

    python3 ARM.py --cell CELL.json --out RUN_DIR

and trains LoRA adapters for one cell with a third-party stack, under the
same protocol as poros-train: a bare AdamW loop (betas 0.9/0.999, eps
1e-8, the cell's weight decay and gradient clipping) under poros-train's
LR schedule (lr_factor: the cell's lr_schedule after lr_warmup_steps of
linear warmup), on poros-train's own synthetic token streams (the same
tokens, step for step and micro-batch for micro-batch), warmup_steps left
out of the timing only, device memory from torch's allocator.  The
summary lists every timed step's wall time (step_s); s_per_step is their
median (step_timing), which poros-arm checks and recomputes in C.  It
writes RUN_DIR/events.jsonl (one line per optimizer step) and
RUN_DIR/adapter/ (PEFT format), and prints exactly one line on stdout:
the summary ("poros.summary/1", docs/schemas.md).  Everything else
(library chatter included) goes to stderr.

An arm that cannot run on this machine (no torch, no CUDA device, a missing
library) prints a summary with status "skipped" and the reason, and exits 0.
Out of device memory is status "oom"; any other failure "error"; both
exit 1.  A bad command line or cell exits 2 (with an "error" summary).

No network, ever: the HF offline switches are set before any import.
"""

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import time
import traceback

# Before transformers or huggingface_hub can read them.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

SUMMARY_SCHEMA = "poros.summary/1"
SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema")
CELL_SCHEMA = "poros.cell/1"
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2

PROG = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "arm"


def log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


class Skip(Exception):
    """The arm cannot run on this machine; the message says why."""


class BadInput(Exception):
    """The command line or the cell is wrong (exit 2)."""


class OutOfMemory(Exception):
    """Device memory ran out; the message says where."""


# --- stdout belongs to the summary ----------------------------------------

class SummaryChannel:
    """Keeps the real stdout for the one summary line and points fd 1 (and
    sys.stdout) at stderr, so that whatever a library prints (Unsloth's
    banner, a C extension's printf) cannot be mistaken for the summary."""

    def __init__(self):
        sys.stdout.flush()
        self._fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def emit(self, summary):
        line = json.dumps(summary, separators=(",", ":"), allow_nan=False) + "\n"
        data = line.encode()
        while data:
            n = os.write(self._fd, data)
            data = data[n:]
        os.close(self._fd)


def finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# --- the cell -------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description="Poros baseline arm: one cell, one summary line.")
    p.add_argument("--cell", required=True, help="the cell (poros.cell/1 JSON file)")
    p.add_argument("--out", required=True, help="the run directory (events.jsonl, adapter/)")

    try:
        return p.parse_args(argv)
    except SystemExit as e:
        if e.code == 0:  # --help
            raise
        raise BadInput("usage: %s --cell CELL.json --out RUN_DIR" % PROG) from None


def load_cell(path, method):
    try:
        with open(path, encoding="utf-8") as f:
            cell = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}:{e.lineno}:{e.colno}: not valid JSON") from None
    if not isinstance(cell, dict) or cell.get("schema") != CELL_SCHEMA:
        raise BadInput(f"{path}: not a cell (expected schema \"{CELL_SCHEMA}\")")
    if cell.get("method") != method:
        raise BadInput(f"{path}: method is \"{cell.get('method')}\", this arm runs \"{method}\"")
    try:
        tr, lora = cell["training"], cell["lora"]
        # lr_warmup_steps is optional: cells written before it lack it (0).
        tr.setdefault("lr_warmup_steps", 0)
        for k in ("steps", "seq_len", "batch_size", "gradient_accumulation_steps", "warmup_steps", "seed",
                  "lr_warmup_steps"):
            if not isinstance(tr[k], int) or tr[k] < 0:
                raise BadInput(f"{path}: training.{k}: not a count: {tr[k]!r}")
        for k in ("learning_rate", "weight_decay", "max_grad_norm"):
            if not isinstance(tr[k], (int, float)):
                raise BadInput(f"{path}: training.{k}: not a number: {tr[k]!r}")
        if tr["steps"] < 1 or tr["seq_len"] < 1 or tr["batch_size"] < 1 or tr["gradient_accumulation_steps"] < 1:
            raise BadInput(f"{path}: training: steps, seq_len, batch_size and accumulation must be >= 1")
        if not isinstance(lora["rank"], int) or lora["rank"] < 1:
            raise BadInput(f"{path}: lora.rank: not a positive integer")
        if not lora["target_modules"]:
            raise BadInput(f"{path}: lora.target_modules: empty")
        # Optional: cells written before the field existed lack it (false).
        if not isinstance(tr.get("gradient_checkpointing", False), bool):
            raise BadInput(f"{path}: training.gradient_checkpointing: expected true or false, "
                           f"got {tr['gradient_checkpointing']!r}")
        cell["model"]["model_id"], cell["precision"], cell["hardware"]["vram_gb"]
    except KeyError as e:
        raise BadInput(f"{path}: missing field {e.args[0]}") from None
    if tr["dataset"] not in ("synthetic", "synthetic:repeat"):
        raise BadInput(f"{path}: training.dataset \"{tr['dataset']}\": the baseline arms train on "
                       "\"synthetic\" and \"synthetic:repeat\" only (poros-train's synthetic streams)")
    refuse_unimplemented(path, tr)
    return cell


# training keys the arms implement, or that poros-arm itself acts on
# (timeout_s, passes); cell.c's training_keys less the ones refused below
TRAINING_KEYS = ("steps", "seq_len", "batch_size", "gradient_accumulation_steps", "warmup_steps", "dataset",
                 "seed", "learning_rate", "lr_schedule", "weight_decay", "max_grad_norm", "timeout_s",
                 "gradient_checkpointing", "lr_warmup_steps", "passes")

# poros-train's, which the arms do not do: refused by name, never ignored
UNIMPLEMENTED = {
    "eval_dataset": "the baseline arms do not evaluate (eval_loss is poros-train's: methods poros and resident)",
    "eval_every": "the baseline arms do not evaluate (eval_loss is poros-train's: methods poros and resident)",
    "tokenizer": "the baseline arms tokenize nothing (they train on the synthetic token streams)",
    "chat_date": "the baseline arms render no chat template (they train on the synthetic token streams)",
    "split": "the baseline arms read no dataset files (they train on the synthetic token streams)",
    "eval_split": "the baseline arms do not evaluate (eval_loss is poros-train's: methods poros and resident)",
    "eval_fraction": "the baseline arms do not evaluate (eval_loss is poros-train's: methods poros and resident)",
}


def refuse_unimplemented(path, tr):
    """A training field this arm would otherwise leave unread is the cell's
    error (exit 2), before torch is imported."""
    for k in tr:
        if k in UNIMPLEMENTED:
            raise BadInput(f"{path}: training.{k}: {UNIMPLEMENTED[k]}")
        if k == "train_on":
            # every token of a synthetic stream is a target, as in poros-train:
            # "all" is what the arms do; "assistant" needs chat records
            if tr[k] != "all":
                raise BadInput(f"{path}: training.train_on {json.dumps(tr[k])}: the baseline arms train on every "
                               "token of the synthetic streams (only \"all\"; \"assistant\" needs chat records)")
        elif k not in TRAINING_KEYS:
            raise BadInput(f"{path}: training.{k}: not implemented by the baseline arms")


# --- what this machine has ------------------------------------------------

def have_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def module_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def import_torch():
    python = f"python {platform.python_version()} at {sys.executable}"
    try:
        import torch
    except ImportError:
        raise Skip(f"torch is not installed ({python})") from None
    except Exception as e:  # a broken install: say so rather than crash
        raise Skip(f"torch cannot be imported ({python}): {type(e).__name__}: {e}") from None
    return torch


def require(torch, cell, modules):
    """Checks for what an arm needs beyond torch, in an order that gives the
    most useful reason first: a device, the libraries, bitsandbytes for nf4."""
    if not torch.cuda.is_available():
        raise Skip(f"no CUDA device visible to torch {torch.__version__} (this arm is GPU-only)")
    for name in modules:
        if not have_module(name):
            raise Skip(f"{name} is not installed (python {platform.python_version()} at {sys.executable})")
    if cell["precision"] == "nf4" and not have_module("bitsandbytes"):
        raise Skip("precision nf4 needs bitsandbytes, which is not installed")


def driver_version():
    """The NVIDIA driver version, from the kernel module or nvidia-smi."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20, check=False)
            first = r.stdout.strip().splitlines()
            if r.returncode == 0 and first:
                return first[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def environment(torch=None):
    env = {"gpu_name": None, "gpu_mem_mb": None, "driver": None, "cuda_runtime": None,
           "python": platform.python_version(), "torch": None, "transformers": module_version("transformers"),
           "peft": module_version("peft")}
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu_name"] = props.name
            env["gpu_mem_mb"] = round(props.total_memory / 2**20)
            env["driver"] = driver_version()
    return env


def cap_device_memory(torch, cell):
    """Makes the device as large as the cell's hardware says (a 24 GB card
    emulated on an 80 GB one): what does not fit there is an honest oom.
    POROS_ARM_NO_VRAM_CAP=1 turns this off."""
    want = float(cell["hardware"]["vram_gb"] or 0) * 2**30
    total = torch.cuda.get_device_properties(0).total_memory
    if os.environ.get("POROS_ARM_NO_VRAM_CAP") == "1" or want <= 0 or want >= total:
        return  # vram_gb null: the spec named no hardware
    torch.cuda.set_per_process_memory_fraction(want / total, 0)
    log(f"device memory capped at {want / 2**30:.1f} GiB of {total / 2**30:.1f} GiB (hardware.vram_gb)")


# --- the model ------------------------------------------------------------

def slugify(s, strip_org=True):
    """The slug poros-expand and poros-train use: "Qwen/Qwen2.5-32B" -> "qwen2_5_32b"."""
    if strip_org and "/" in s:
        s = s.rsplit("/", 1)[1]
    out, pending = [], False
    for ch in s:
        if ch.isascii() and ch.isalnum():
            if pending and out:
                out.append("_")
            pending = False
            out.append(ch.lower())
        else:
            pending = True
    return "".join(out)


def check_regular(path):
    """Refuses what is not a readable regular file, naming it, as
    tools/lib/model/safetensors.c's st_check_regular does: a dangling link (an
    interrupted download), a FIFO, a directory, an unreadable file.  Opened
    with O_NONBLOCK and checked with fstat, so that a FIFO never blocks."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise BadInput(f"{path}: a dangling symbolic link (an interrupted download?)") from None
        raise BadInput(f"{path}: No such file or directory") from None
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path}: not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{path}: not a regular file")
    finally:
        os.close(fd)


def name_is_confined(rel):
    """A relative path that stays inside its directory (util.c's path_is_confined)."""
    return bool(rel) and not rel.startswith("/") and ".." not in rel.split("/")


def checkpoint_weights(d):
    """The weight files of checkpoint directory d, each checked, as
    poros-train's st_checkpoint_open finds them: what is there decides, and
    a broken index or file is an error naming it, never a reason to fall
    back to synthetic weights."""
    index, single = os.path.join(d, "model.safetensors.index.json"), os.path.join(d, "model.safetensors")
    if os.path.lexists(index):
        check_regular(index)
        try:
            with open(index, encoding="utf-8") as f:
                wmap = json.load(f).get("weight_map")
        except OSError as e:
            raise BadInput(f"{index}: {e.strerror}") from None
        except (ValueError, AttributeError):
            raise BadInput(f"{index}: not a JSON object") from None
        if not isinstance(wmap, dict) or not wmap:
            raise BadInput(f"{index}: no \"weight_map\" object (or it is empty)")
        files = []
        for name, shard in wmap.items():
            if not isinstance(shard, str) or not name_is_confined(shard):
                raise BadInput(f"{index}: weight_map \"{name}\": not a file name inside the checkpoint directory")
            if shard not in files:
                files.append(shard)
        paths = [os.path.join(d, f) for f in files]
    elif os.path.lexists(single):
        paths = [single]
    elif (os.path.lexists(os.path.join(d, "pytorch_model.bin"))
          or os.path.lexists(os.path.join(d, "pytorch_model.bin.index.json"))):
        raise BadInput(f"{d}: no model.safetensors or model.safetensors.index.json (only pytorch_model.bin "
                       "weights, which the arms do not read: convert them to safetensors)")
    else:
        raise BadInput(f"{d}: no model.safetensors or model.safetensors.index.json (a checkpoint "
                       "directory must hold its weights)")
    for p in paths:
        check_regular(p)
    return paths


def hub_cache_dir():
    for var, suffix in (("HF_HUB_CACHE", ""), ("HF_HOME", "hub"), ("XDG_CACHE_HOME", "huggingface/hub")):
        v = os.environ.get(var)
        if v:
            return os.path.join(v, suffix) if suffix else v
    home = os.environ.get("HOME")
    return os.path.join(home, ".cache", "huggingface", "hub") if home else None


def pick_snapshot(repo_dir):
    """The snapshot refs/main names when that directory exists (what
    huggingface_hub loads: a broken config.json there is then an error, not
    a reason to take another), else the newest one holding a config.json;
    model_config.c's pick_snapshot."""
    snaps = os.path.join(repo_dir, "snapshots")
    try:
        with open(os.path.join(repo_dir, "refs", "main"), encoding="utf-8") as f:
            ref = f.read().strip()
        if re.fullmatch(r"[A-Za-z0-9._-]+", ref) and ref not in (".", "..") and os.path.isdir(os.path.join(snaps, ref)):
            return os.path.join(snaps, ref)
    except (OSError, UnicodeDecodeError):
        pass
    best, best_t = None, None
    try:
        names = os.listdir(snaps)
    except OSError:
        return None
    for name in names:
        d = os.path.join(snaps, name)
        if os.path.isdir(d) and os.path.isfile(os.path.join(d, "config.json")):
            t = os.stat(d).st_mtime_ns
            if best is None or t > best_t:
                best, best_t = d, t
    return best


def models_dirs():
    """Where Poros keeps configs/models/<slug>.json: $POROS_HOME, the source
    tree (share/poros/arms -> ../../../configs) and an install
    (PREFIX/share/poros/arms -> ../configs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    if os.environ.get("POROS_HOME"):
        dirs.append(os.path.join(os.environ["POROS_HOME"], "configs", "models"))
    dirs.append(os.path.normpath(os.path.join(here, "..", "..", "..", "configs", "models")))
    dirs.append(os.path.normpath(os.path.join(here, "..", "configs", "models")))
    return dirs


class ModelSource:
    """Where a model comes from: config_path always; checkpoint_dir when the
    id resolved to a checkpoint (a local directory or an HF cache snapshot),
    whose weights were found and checked (weight_files); None only for a
    shipped configs/models shape, whose weights are synthetic, from the seed."""

    def __init__(self, model_id, config_path, checkpoint_dir, weight_files=()):
        self.model_id = model_id
        self.config_path = config_path
        self.checkpoint_dir = checkpoint_dir
        self.weight_files = list(weight_files)

    @property
    def weights(self):
        return "real" if self.checkpoint_dir else "synthetic"


def checkpoint_source(model_id, d):
    cfg = os.path.join(d, "config.json")
    check_regular(cfg)
    return ModelSource(model_id, cfg, d, checkpoint_weights(d))


def resolve_model(model_id):
    """poros-train's rule (tools/lib/model/model_config.c, docs/checkpoints.md): a
    local directory with a config.json, then the HF cache, then Poros' own
    configs/models/<slug>.json.  A checkpoint loads its own weights or the
    run stops naming the file (BadInput, exit 2); synthetic weights only
    for a shipped shape.  Never the network."""
    if not model_id:
        raise BadInput("empty model id")
    looked = []
    cfg = os.path.join(model_id, "config.json")
    # a config.json that is there but broken is an error naming it, not "not found"
    if os.path.isdir(model_id) and os.path.lexists(cfg):
        return checkpoint_source(model_id, model_id)
    looked.append(cfg)
    cache = hub_cache_dir()
    parts = model_id.split("/")
    if cache is None:
        looked.append("the HF cache (no HF_HUB_CACHE, HF_HOME or HOME)")
    elif len(parts) == 2 and all(re.fullmatch(r"[A-Za-z0-9._-]+", p) and p not in (".", "..") for p in parts):
        repo_dir = os.path.join(cache, f"models--{parts[0]}--{parts[1]}")
        snap = pick_snapshot(repo_dir)
        if snap:
            return checkpoint_source(model_id, snap)
        looked.append(os.path.join(repo_dir, "snapshots", "*", "config.json"))
    slug = slugify(model_id)
    for d in models_dirs() if slug else ():
        p = os.path.join(d, slug + ".json")
        if os.path.isfile(p):
            return ModelSource(model_id, p, None)
        looked.append(p)
    raise BadInput(f"model {model_id}: no config found (looked in: {'; '.join(looked)})")


def dtype_kwargs(torch):
    """transformers renamed torch_dtype to dtype (4.56); use what this one takes."""
    import transformers
    major, minor = (int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    return {"dtype": torch.bfloat16} if (major, minor) >= (4, 56) else {"torch_dtype": torch.bfloat16}


def load_config(source):
    import transformers
    with open(source.config_path, encoding="utf-8") as f:
        d = json.load(f)
    if not isinstance(d, dict) or "model_type" not in d:
        raise BadInput(f"{source.config_path}: not a Hugging Face config.json (no model_type)")
    model_type = d.pop("model_type")
    # Keys that only describe the file, not the model (model_id: Poros' own
    # configs/models/ name the model they stand for).
    for k in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "model_id"):
        d.pop(k, None)
    return transformers.AutoConfig.for_model(model_type, **d)


def synthetic_model_on_device(torch, config, seed):
    """A model of config's shape with random weights (config.initializer_range,
    from the seed) built directly on the device in bf16: nothing is read,
    nothing goes through host memory."""
    import transformers
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, **dtype_kwargs(torch))
    return model


def synthetic_tensor(torch, name, shape, std, gen):
    """The bf16 value of parameter name in a synthetic model: one for a norm
    weight, zero for a bias (both on the host), else normal(0, std) drawn in
    fp32 on the device from generator gen (and left there)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    if name.endswith(".bias"):
        return torch.zeros(shape, dtype=torch.bfloat16)
    t = torch.empty(shape, device="cuda", dtype=torch.float32).normal_(0.0, std, generator=gen)
    return t.to(torch.bfloat16)


def write_synthetic_checkpoint(torch, config, directory, seed, shard_bytes=4 << 30):
    """Writes a loadable HF checkpoint of config's shape with random weights
    (for the paths that only load from disk: bitsandbytes quantisation,
    Unsloth): config.json, sharded bf16 safetensors with an index, and a
    small tokenizer.  Norm weights are one, biases zero, the rest normal
    with config.initializer_range, drawn on the device from the seed."""
    import transformers
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    with torch.device("meta"):
        skeleton = transformers.AutoModelForCausalLM.from_config(config)
    shapes = [(n, tuple(t.shape)) for n, t in skeleton.state_dict().items()]
    del skeleton
    tied = getattr(config, "tie_word_embeddings", False)
    std = float(getattr(config, "initializer_range", 0.02))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shard, shard_size, shards, weight_map, total = {}, 0, [], {}, 0

    def flush():
        nonlocal shard, shard_size
        if shard:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(shard, os.path.join(directory, name), metadata={"format": "pt"})
            shards.append((name, list(shard)))
            shard, shard_size = {}, 0

    for name, shape in shapes:
        if tied and name == "lm_head.weight":
            continue
        t = synthetic_tensor(torch, name, shape, std, gen).cpu()
        nbytes = t.numel() * t.element_size()
        if shard and shard_size + nbytes > shard_bytes:
            flush()
        shard[name] = t.contiguous()
        shard_size += nbytes
        total += nbytes
    flush()
    for fname, names in shards:
        for n in names:
            weight_map[n] = fname
    with open(os.path.join(directory, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config.save_pretrained(directory)
    write_tokenizer(directory)
    log(f"synthetic checkpoint: {total / 2**30:.2f} GiB in {len(shards)} shard(s) under {directory}")


def loader_checkpoint(torch, source, out_dir, seed):
    """(checkpoint directory, temporary directory or None) for a loader that
    reads only checkpoints: source's own, or else the seed's synthetic
    weights written as one under out_dir, for the caller to remove when the
    run is done (removed_after)."""
    if source.checkpoint_dir is not None:
        return source.checkpoint_dir, None
    ckpt = os.path.join(out_dir, "synthetic_checkpoint")
    write_synthetic_checkpoint(torch, load_config(source), ckpt, seed)
    return ckpt, ckpt


@contextlib.contextmanager
def removed_after(tmp):
    """Removes directory tmp (from loader_checkpoint; None: nothing) when the
    block ends, however it ends."""
    try:
        yield
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def write_tokenizer(directory):
    """A small word-level tokenizer, so that loaders which insist on one
    (Unsloth) find it; training never tokenizes text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for i in range(252):
        vocab[f"t{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(directory)


def lora_config(cell):
    import peft
    lo = cell["lora"]
    return peft.LoraConfig(r=int(lo["rank"]), lora_alpha=float(lo["alpha"]), lora_dropout=float(lo["dropout"]),
                           target_modules=list(lo["target_modules"]), bias="none", task_type="CAUSAL_LM")


def wants_checkpointing(cell):
    """The cell's shared training.gradient_checkpointing (absent: false)."""
    return bool(cell["training"].get("gradient_checkpointing", False))


def log_checkpointing(on, how):
    """One stderr line saying which setting a run used, and through what."""
    log(f"gradient checkpointing: {'on' if on else 'off'} "
        f"(training.gradient_checkpointing {'true' if on else 'false'}; {how})")


def apply_checkpointing(model, cell):
    """Honours training.gradient_checkpointing on a transformers model, before
    get_peft_model: enable_input_require_grads hooks the base model's input
    embeddings, whose output must carry a gradient into the checkpointed
    layers when every base weight is frozen.  Off, it makes sure nothing
    left checkpointing on, so that every arm keeps its activations as
    Poros' resident method does.  Returns whether it is on."""
    if wants_checkpointing(cell):
        # Non-reentrant: the variant torch recommends; the reentrant one
        # passes no gradient back through a segment whose input needs none.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
        log_checkpointing(True, "transformers, use_reentrant=False")
        return True
    if getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_disable()
    log_checkpointing(False, "transformers")
    return False


def bnb_config(torch, **extra):
    """NF4 as Poros does it: NormalFloat4, block 64 (bitsandbytes' block),
    absmax scales not quantised again, bf16 compute."""
    import transformers
    return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                           bnb_4bit_use_double_quant=False,
                                           bnb_4bit_compute_dtype=torch.bfloat16, **extra)


# --- the training protocol ------------------------------------------------

def lr_factor(schedule, step0, steps, warmup=0):
    """Multiplier of the base learning rate at 0-based step step0: poros-train's
    lr_at (tools/poros-train/engine.c) term for term, HF's
    get_*_schedule_with_warmup: linear warmup from 0 over `warmup` steps,
    then the schedule over the steps after it."""
    s, w, n = float(step0), float(warmup), float(steps)
    if s < w:
        return s / (w if w > 1 else 1.0)
    rest = n - w if n - w > 1 else 1.0
    if schedule == "linear":
        return max(0.0, (n - s) / rest)
    if schedule == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((s - w) / rest))))
    return 1.0


def median(xs):
    """The median poros-arm computes (tools/lib/records/timing.c): the middle value,
    or the mean of the middle two."""
    v = sorted(xs)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def step_timing(times, tokens_per_step):
    """The summary's timing fields from the timed steps' wall times (seconds,
    warmup steps already left out), as every arm reports them: the list
    itself (step_s), its median, its extremes, tokens per second at the median."""
    times = [float(f"{t:.6f}") for t in times]  # the 6 decimals events.jsonl has
    med = median(times)
    return {"step_s": times, "steps_measured": len(times), "s_per_step": med,
            "s_per_step_min": min(times) if times else None, "s_per_step_max": max(times) if times else None,
            "tokens_per_s": tokens_per_step / med if med else None}


def is_oom(torch, e):
    if isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    return isinstance(e, RuntimeError) and ("out of memory" in str(e) or "CUBLAS_STATUS_ALLOC_FAILED" in str(e))


_MASK64 = (1 << 64) - 1


def mix64(x):
    """poros_mix64 (kernels/ops.h): the splitmix64 finaliser, mod 2^64."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def synthetic_rows(seed, vocab, seq_len, first, count):
    """Input rows first .. first+count-1 of poros-train's "synthetic" stream
    (tools/poros-train/data.c): sequence i is tokens mix64(key ^ pos) % vocab
    at positions i*(S+1) .. i*(S+1)+S, key = mix64(seed ^ 0xda7a5eed);
    poros-train feeds the first S and predicts the next S.  A transformers
    model given the first S as input_ids and labels predicts S-1 of them (it
    shifts the labels inside), so the losses differ by that one token."""
    key = mix64((seed ^ 0xDA7A5EED) & _MASK64)
    rows = []
    for i in range(first, first + count):
        start = i * (seq_len + 1)
        rows.append([mix64(key ^ (start + t)) % vocab for t in range(seq_len)])
    return rows


REPEAT_PERIOD = 16  # tools/poros-train/data.h


def repeat_cycle(seed, vocab):
    """poros-train's "synthetic:repeat" cycle: the first min(vocab, 16)
    distinct values of mix64(key ^ draw) % vocab, draw = 0, 1, ..."""
    key = mix64((seed ^ 0xDA7A5EED) & _MASK64)
    period, cycle, draw = min(vocab, REPEAT_PERIOD), [], 0
    while len(cycle) < period:
        t = mix64(key ^ draw) % vocab
        draw += 1
        if t not in cycle:
            cycle.append(t)
    return cycle


def repeat_rows(seed, vocab, seq_len, first, count):
    """Input rows of "synthetic:repeat": position p holds cycle[p % period]."""
    cycle = repeat_cycle(seed, vocab)
    return [[cycle[(i * (seq_len + 1) + t) % len(cycle)] for t in range(seq_len)] for i in range(first, first + count)]


def step_rows(cell, vocab, step):
    """The rows of 1-based optimizer step `step`, one list of batch_size rows
    per micro-batch, in poros-train's order (micro-batch-major)."""
    tr = cell["training"]
    accum, batch, seq = tr["gradient_accumulation_steps"], tr["batch_size"], tr["seq_len"]
    first = (step - 1) * accum * batch
    rows = repeat_rows if tr.get("dataset") == "synthetic:repeat" else synthetic_rows
    return [rows(tr["seed"], vocab, seq, first + j * batch, batch) for j in range(accum)]


def train(torch, model, cell, out_dir, summary, input_device="cuda"):
    """The shared loop.  Fills summary's metrics; writes events.jsonl."""
    tr = cell["training"]
    steps, warmup = tr["steps"], tr["warmup_steps"]
    accum, batch, seq = tr["gradient_accumulation_steps"], tr["batch_size"], tr["seq_len"]
    tokens = cell["tokens_per_step"]  # the cell's (cell_tokens_per_step), not recomputed here
    # transformers shifts labels=ids inside: seq_len - 1 targets a row
    supervised = batch * (seq - 1) * accum
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise RuntimeError("no trainable parameters: LoRA matched none of lora.target_modules")
    n_train = sum(p.numel() for p in params)
    log(f"trainable parameters: {n_train} in {len(params)} tensors ({params[0].dtype})")
    opt = torch.optim.AdamW(params, lr=tr["learning_rate"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=tr["weight_decay"])
    # LambdaLR calls the lambda with 0 first: step k (1-based) runs at lr_factor(k - 1), as lr_at(k)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(tr["lr_schedule"], s, steps, tr.get("lr_warmup_steps", 0)))
    vocab = model.config.vocab_size
    model.train()

    times, allocs, losses = [], [], []
    event_keys = dict.fromkeys(required_keys("event.schema.json"))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    events = open(os.path.join(out_dir, "events.jsonl"), "w", encoding="utf-8")
    try:
        for step in range(1, steps + 1):
            lr = opt.param_groups[0]["lr"]
            # the step's tokens, made and copied before the clock starts
            micro = [torch.tensor(rows, dtype=torch.long, device=input_device)
                     for rows in step_rows(cell, vocab, step)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss_sum = torch.zeros((), device=micro[0].device, dtype=torch.float32)
            for ids in micro:
                out = model(input_ids=ids, labels=ids)
                loss = out.loss / accum
                loss.backward()
                loss_sum += loss.detach().float()
            max_norm = tr["max_grad_norm"] if tr["max_grad_norm"] > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            opt.step()
            sched.step()
            alloc = torch.cuda.memory_allocated()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            loss_v, peak = float(loss_sum), torch.cuda.max_memory_allocated()
            losses.append(loss_v)
            if step > warmup:
                times.append(dt)
                allocs.append(alloc)
            # every key null first (epoch: the synthetic streams have no end; nothing is copied)
            ev = dict(event_keys)
            ev.update(step=step, loss=float(f"{loss_v:.9g}"), lr=lr, grad_norm=finite_or_none(grad_norm),
                      step_s=float(f"{dt:.6f}"), tokens=tokens, tokens_supervised=supervised,
                      vram_alloc_mb=alloc / 2**20, vram_peak_mb=peak / 2**20)
            events.write(json.dumps(ev, separators=(",", ":")) + "\n")
            events.flush()
            log(f"step {step}/{steps} loss {loss_v:.4f} {dt:.3f} s{' (warmup)' if step <= warmup else ''} "
                f"peak {peak / 2**20:.0f} MiB")
    finally:
        events.close()
        # as poros-train's: the steps done, and the events once they hold one
        summary["steps"] = len(losses)
        if losses:
            summary["events"] = events.name
        summary["vram_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        summary["loss_first"] = losses[0] if losses else None
        summary["loss_last"] = losses[-1] if losses else None
        summary.update(step_timing(times, tokens))
        if allocs:
            summary["vram_avg_mb"] = sum(allocs) / len(allocs) / 2**20


def save_adapter(model, out_dir, source):
    path = os.path.join(out_dir, "adapter")
    model.save_pretrained(path)
    # Name the base as the cell does, not the temporary synthetic checkpoint.
    cfg = os.path.join(path, "adapter_config.json")
    try:
        with open(cfg, encoding="utf-8") as f:
            c = json.load(f)
        c["base_model_name_or_path"] = source.model_id
        with open(cfg, "w", encoding="utf-8") as f:
            json.dump(c, f, indent=2)
    except (OSError, ValueError):
        pass
    return path


# --- the driver -----------------------------------------------------------

def required_keys(schema_name):
    """The keys an arm writes in a record, in order: the "required" list of
    share/poros/schema/<schema_name> (summary.schema.json,
    event.schema.json), which the tests hold against every writer."""
    with open(os.path.join(SCHEMA_DIR, schema_name), encoding="utf-8") as f:
        return json.load(f)["required"]


def new_summary(method, out_dir):
    # every key null (backend too, until a CUDA device is found: a skipped arm computed nothing)
    try:
        summary = dict.fromkeys(required_keys("summary.schema.json"))
    except (OSError, ValueError, KeyError) as e:
        # no key list, no honest summary: an installation without share/poros/schema
        log(f"{os.path.join(SCHEMA_DIR, 'summary.schema.json')}: cannot read the summary's keys: {e}")
        sys.exit(EXIT_RUNTIME)
    summary.update(schema=SUMMARY_SCHEMA, status="error", method=method, mode=method, run_dir=out_dir,
                   env=environment())
    return summary


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def main(method, modules, run):
    """Runs one arm: run(torch, cell, source, out_dir, summary) builds the
    model, trains it (with train()) and saves the adapter."""
    channel = SummaryChannel()
    summary = new_summary(method, None)
    code, torch = EXIT_OK, None
    try:
        args = parse_args()
        summary["run_dir"] = args.out
        cell = load_cell(args.cell, method)
        # before torch: a checkpoint that cannot load is the cell's error
        # (exit 2) on any machine, as it is in poros-train
        source = resolve_model(cell["model"]["model_id"])
        torch = import_torch()
        summary["env"] = environment(torch)
        require(torch, cell, modules)
        summary["backend"] = "cuda"
        summary.update(steps=0, warmup_steps=cell["training"]["warmup_steps"])
        summary["weights"] = source.weights
        log(f"{cell['cell_id']}: model {source.model_id} from {source.config_path} ({source.weights} weights), "
            f"{cell['precision']}, {torch.cuda.get_device_name(0)}")
        os.makedirs(args.out, exist_ok=True)
        cap_device_memory(torch, cell)
        run(torch, cell, source, args.out, summary)
        summary["adapter"] = os.path.join(args.out, "adapter")
        summary["status"] = "ok"
    except Skip as e:
        summary.update(status="skipped", error=str(e))
        log(f"skipped: {e}")
    except BadInput as e:
        summary.update(status="error", error=str(e))
        log(str(e))
        code = EXIT_USAGE
    except KeyboardInterrupt:
        summary.update(status="error", error="interrupted")
        code = EXIT_RUNTIME
    except Exception as e:  # noqa: BLE001: every failure becomes an honest summary
        traceback.print_exc(file=sys.stderr)
        if torch is not None and (isinstance(e, OutOfMemory) or is_oom(torch, e)):
            summary.update(status="oom", error=first_line(e))
        else:
            summary.update(status="error", error=first_line(e))
        code = EXIT_RUNTIME
    finally:
        if torch is not None and summary["status"] in ("oom", "error") and summary["vram_peak_mb"] is None:
            try:
                summary["vram_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
            except Exception:  # noqa: BLE001: the device itself may be what failed
                pass
    for k in ("s_per_step", "s_per_step_min", "s_per_step_max", "tokens_per_s", "vram_peak_mb", "vram_avg_mb",
              "loss_first", "loss_last"):
        summary[k] = finite_or_none(summary[k])
    channel.emit(summary)
    return code
