"""The byte-level BPE pieces the tokenizer fixture generators share
(tests/chat/make_expected.py, tests/gpu/chat_fixtures.py,
tests/fixtures/tokenizer/make_tiny.py): GPT-2's byte-to-character map and
the trimming of a tokenizer.json to what some texts can use."""


def bytes_to_unicode():
    """GPT-2's map of each byte to the printable character that stands for
    it in a byte-level vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xac + 1)) + list(range(0xae, 0xff + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def trim(tok, texts):
    """Keeps (in tok, a tokenizer.json's dict, which is returned) every
    vocabulary entry and merge whose string is a substring of one of texts
    in byte-level form, every byte and every added token: BPE on these texts
    can only use those, so it gives the same ids (each caller proves it by
    tokenizing with both)."""
    b2u = bytes_to_unicode()
    big = "\n".join("".join(b2u[b] for b in t.encode("utf-8")) for t in texts)
    added = {a["id"] for a in tok["added_tokens"]}
    model = tok["model"]
    model["vocab"] = {k: v for k, v in model["vocab"].items()
                      if k in big or v in added or (len(k) == 1 and k in b2u.values())}
    # `tokenizers` numbers an added token that is not in the vocabulary
    # after it (len(vocab) + n): with a sparse vocabulary that would move
    # the ids, so each added token is put in it under its own id
    for a in tok["added_tokens"]:
        model["vocab"][a["content"]] = a["id"]
    kept = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if (a + b) in big:
            kept.append(m)
    model["merges"] = kept
    return tok
