#!/usr/bin/env python3
"""Goldens for the tokenizer lucid builds from a GGUF's metadata: the ids of the HF tokenizer that
transformers builds from the same file (transformers' own GGUF tokenizer conversion,
integrations/gguf/gguf_tokenizer_mapping.py), on the tokenizer corpus
(tests/fixtures/tokenizers/corpus.json).

transformers' `AutoTokenizer.from_pretrained(dir, gguf_file=...)` reads the metadata with a reader
that imports torch; this script reads the same keys with the `gguf` package instead (what that
reader returns for them: strings, ints, lists) and calls the same conversion, so torch is not
needed. Pins: requirements.txt here plus transformers / tokenizers of
tools/reference/requirements-models.txt.

Usage: .venv/bin/python tools/reference/gguf/tokenizer_goldens.py GGUF_FILE OUT.jsonl
  one line per corpus string: {"ids": encode(text, add_special_tokens=False)}, "dec" when
  decode(ids) != text.
"""
import json
import os
import sys

import gguf
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.contents(i) for i in range(len(f.data))]
    return f.contents()


def hf_tokenizer(path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    tok = {}
    for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
        if f"tokenizer.{key}" in r.fields:
            tok[name] = field(r, f"tokenizer.{key}")
    backend, _ = convert_gguf_tokenizer(arch, tok)
    return backend


def main():
    backend = hf_tokenizer(sys.argv[1])
    corpus = json.load(open(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "corpus.json")))
    with open(sys.argv[2], "w") as out:
        for text in corpus:
            ids = backend.encode(text, add_special_tokens=False).ids
            row = {"ids": ids}
            dec = backend.decode(ids, skip_special_tokens=False)
            if dec != text:
                row["dec"] = dec
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    j = json.loads(backend.to_str())
    j["model"] = {k: v for k, v in j["model"].items() if k not in ("vocab", "merges")}
    j["added_tokens"] = j["added_tokens"][:3] + [f"... {len(j['added_tokens'])} in all"]
    print(json.dumps(j, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
