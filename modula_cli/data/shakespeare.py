"""Tiny Shakespeare, character level: 65 symbols, first 90 % train, last 10 % validation (SPEC §8)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .base import TokenDataset
from .storage import data_root, fetch, prepare_once

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TRAIN_FRACTION = 0.9


def shakespeare(context: int = 128, root: str | None = None, source: str | None = None,
                **unused: object) -> TokenDataset:
    folder = data_root(root) / "shakespeare"
    text_path = Path(source).expanduser() if source else folder / "input.txt"
    if not text_path.is_file():
        fetch(URL, text_path, "python scripts/prepare_data.py shakespeare")
    expected = {"dataset": "shakespeare", "source": str(text_path.resolve()), "tokenizer": "char",
                "format": "uint16", "input_bytes": text_path.stat().st_size}

    def build(tmp: Path) -> dict:
        text = text_path.read_text(encoding="utf-8")
        chars = sorted(set(text))
        index = {c: i for i, c in enumerate(chars)}
        ids = np.array([index[c] for c in text], dtype=np.uint16)
        split = int(len(ids) * TRAIN_FRACTION)
        ids[:split].tofile(tmp / "train.bin")
        ids[split:].tofile(tmp / "val.bin")
        (tmp / "vocab.json").write_text(json.dumps(chars))
        return {"vocab_size": len(chars), "tokens": {"train": split, "val": len(ids) - split}}

    meta = prepare_once(folder / "prepared-char", expected, build)
    prepared = folder / "prepared-char"
    train = np.memmap(prepared / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(prepared / "val.bin", dtype=np.uint16, mode="r")
    return TokenDataset("shakespeare", train, val, vocab_size=meta["vocab_size"], context=context, meta=meta)
