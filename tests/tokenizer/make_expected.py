#!/usr/bin/env python3
"""Builds the reference fixtures for Poros' tokenizer with HF `tokenizers`.

usage: make_expected.py OUTDIR

Needs only the `tokenizers` package (it was written against 0.23) and no
network.  It trains two small byte-level BPE tokenizers on the corpus below,
with the pipelines of the models Poros supports, and writes for each the
tokenizer.json and expected.jsonl, one line per test string:

  {"text": ..., "ids": [...], "tokens": [...], "ids_special": [...],
   "decoded": ..., "decoded_skip": ...}

ids come from encode(text, add_special_tokens=False), ids_special from
add_special_tokens=True, decoded / decoded_skip from decode(ids,
skip_special_tokens=False / True).

  OUTDIR/qwen_like/    Qwen2: NFC, Split(Qwen2 regex, Isolated) + ByteLevel,
                       ByteLevel decoder, special tokens <|endoftext|>
                       <|im_start|> <|im_end|>
  OUTDIR/llama3_like/  Llama-3: no normalizer, \\p{N}{1,3}, ignore_merges,
                       <|begin_of_text|> added by the post-processor

Poros' tests (tests/tokenizer.bats) compare bin/poros-tokenize against these.
To refresh the committed fixtures, on a machine with `tokenizers`:

  python3 tests/tokenizer/make_expected.py "$OUT"
  cp -r "$OUT"/qwen_like "$OUT"/llama3_like tests/fixtures/tokenizer/
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = QWEN2_PATTERN.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1500

# The training text: several scripts, numbers, code and chat markup, so the
# merges cover what the test strings exercise.  Fixed, so the fixture is
# reproducible.
CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
It's a truth universally acknowledged that a single man in possession of a good fortune must be in want of a wife.
I'm sure we'll see; they've said they'd come, and you're welcome. DON'T SHOUT, IT'S LATE.
Training language models with low-rank adapters streams the frozen base from host memory to the GPU.
Poros fine-tunes LoRA adapters on large models: blockwise streaming overlaps the copy with the compute.
In 2024, 1,234 people paid $56.78 each; 3.14159 is pi and 2.71828 is e. Call 555-0123 at 10:30.
Le café est très bon, la crème brûlée aussi. Où est la gare ? À bientôt, naïve façade, résumé.
Die Straße ist schön, über den Brücken fährt der Zug. Grüße aus München und Köln.
El niño comió jamón y pidió más. ¿Dónde está la biblioteca? ¡Qué día tan bonito!
Привет, мир! Как дела? Москва и Санкт-Петербург — большие города.
你好，世界！今天天气很好。我们在学习语言模型和分词器。中文没有空格。
こんにちは世界。東京は大きな都市です。ひらがなとカタカナと漢字。
안녕하세요 세계. 서울은 한국의 수도입니다.
مرحبا بالعالم. اللغة العربية جميلة. ١٢٣ ٤٥٦
नमस्ते दुनिया। हिंदी भाषा सुंदर है।
สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง
Emoji: 😀 😃 😄 👍 👍🏽 ❤️ 🎉 🇫🇷 🇯🇵 👨‍👩‍👧‍👦 and ✨ sparkles ✨.
def train(model, data):
    for step, batch in enumerate(data):
        loss = model(batch)  # forward
        loss.backward()
    return loss.item() ** 2
int main(void) { printf("%d\\n", 42); return 0; }
{"text": "a json line", "ids": [1, 2, 3], "ok": true}
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
What is the capital of France?<|im_end|>
<|im_start|>assistant
The capital of France is Paris.<|im_end|><|endoftext|>
    indented    text	with	tabs
and

blank lines


here.
"""

# Each string exercises one part of the pipeline; the comments say which.
TESTS = [
    "Hello world",
    "Hello, World! It's 2024 and I'm testing TOKENIZERS' edge-cases.",
    "DON'T YOU'LL WE'VE SHE'D I'M THEY'RE IT'S",        # (?i:) contractions
    "Café naïve façade résumé Straße Ærø",
    "Cafe\u0301 nai\u0308ve A\u030angstro\u0308m",           # NFC composes these
    "\u212b \ufb01 \u2126",                               # NFC-stable compatibility chars
    "你好，世界！今天是2024年。",
    "こんにちは世界。東京タワー",
    "안녕하세요 세계",
    "Привет мир, как дела?",
    "مرحبا بالعالم ١٢٣",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "😀👍🏽 family: 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 ✨",
    "3.14159 1234567 007 12,345,678.90",                # \p{N} vs \p{N}{1,3}
    "a  b   c\t\td\n\ne  \n  f",
    "   leading spaces",
    "trailing spaces   ",
    "\r\n windows\r\nline\r\n\r\n",
    "a\u3000\u3000b x\u00a0\u00a0y z\u2028\u2028w",      # Unicode white space
    "p\u0085\u0085q",                                    # NEL: white space to Oniguruma
    "m\u180e\u180en",                                    # U+180E: not white space any more
    "def f(x):\n    return x**2  # square\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|><|endoftext|>",
    "text<|endoftext|>more<|endoftext|><|endoftext|>",
    "<|im_sta <|im_end <|endoftext|",                   # near misses are plain text
    "=" * 300,                                            # long punctuation word
    " " * 100 + "x",                                     # long white-space run
    "ab" * 200,                                           # long letter word
    "",
    "\u200b\u200d zero\u200bwidth",
    "ǅemo ǈ ﬀ ẞ ſ 's 'S 'ſ",                              # case folding in (?i:)
]


def build(kind):
    tok = Tokenizer(models.BPE())
    if kind == "qwen_like":
        tok.normalizer = normalizers.NFC()
        pattern = QWEN2_PATTERN
    else:
        pattern = LLAMA3_PATTERN
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = SPECIALS if kind == "qwen_like" else ["<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=1, show_progress=False,
                                  special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS.splitlines(keepends=True) * 3, trainer=trainer)
    if kind == "qwen_like":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        return tok
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    # ignore_merges is set through the JSON: training rebuilds the model without it.
    doc = json.loads(tok.to_str())
    doc["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(doc))


def write(outdir, kind):
    tok = build(kind)
    d = os.path.join(outdir, kind)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    eos = "<|endoftext|>" if kind == "qwen_like" else "<|end_of_text|>"
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": eos}, f)
        f.write("\n")
    with open(os.path.join(d, "expected.jsonl"), "w", encoding="utf-8") as f:
        for text in TESTS:
            enc = tok.encode(text, add_special_tokens=False)
            rec = {
                "text": text,
                "ids": enc.ids,
                "tokens": enc.tokens,
                "ids_special": tok.encode(text, add_special_tokens=True).ids,
                "decoded": tok.decode(enc.ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(enc.ids, skip_special_tokens=True),
            }
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"{d}: vocab {tok.get_vocab_size()}, {len(TESTS)} strings", file=sys.stderr)


def main():
    if len(sys.argv) != 2:
        print("usage: make_expected.py OUTDIR", file=sys.stderr)
        sys.exit(2)
    import tokenizers
    print(f"tokenizers {tokenizers.__version__}", file=sys.stderr)
    for kind in ("qwen_like", "llama3_like"):
        write(sys.argv[1], kind)


if __name__ == "__main__":
    main()
