"""Tiny Shakespeare, character level: 65 symbols, first 90 % train, last 10 % validation (docs/design.md, "Data")."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from .base import TokenDataset
from .storage import TOKEN_FILES, VOCAB_FILE, DataUnavailable, data_root, fetch, prepare_once

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TRAIN_FRACTION = 0.9


def _text_path(root: str | None, source: str | None) -> Path:
    return Path(source).expanduser() if source else data_root(root) / "shakespeare" / "input.txt"


def _read_text(path: Path) -> str:
    """The text of ``path``; DataUnavailable in one line when it is not UTF-8 text (a token file, an archive)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataUnavailable(
            f"data=shakespeare: {path} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at position "
            f"{error.start}); this dataset reads a plain text file, like tiny Shakespeare's input.txt, and makes its "
            f"characters the tokens: name such a file with data.source") from None


@functools.lru_cache(maxsize=8)
def _sizes(path: Path, size: int, mtime: float) -> dict[str, int]:
    characters = len(_read_text(path))
    return {"train": int(characters * TRAIN_FRACTION), "validation": characters - int(characters * TRAIN_FRACTION)}


def shakespeare_split_sizes(root: str | None = None, source: str | None = None, **unused: object) -> dict | None:
    """Characters per split, from the text file if it is already here (nothing is downloaded)."""
    path = _text_path(root, source)
    if not path.is_file():
        return None
    stat = path.stat()
    return _sizes(path.resolve(), stat.st_size, stat.st_mtime)


def prepare_shakespeare(root: str | None = None, source: str | None = None, **unused: object) -> tuple[Path, dict]:
    """The text (downloaded when absent) and its character-level token files: (their folder, metadata)."""
    text_path = _text_path(root, source)
    fetch(URL, text_path, "shakespeare")
    expected = {"dataset": "shakespeare", "source": str(text_path.resolve()), "tokenizer": "char",
                "format": "uint16", "input_bytes": text_path.stat().st_size}

    def build(tmp: Path) -> dict:
        text = _read_text(text_path)
        chars = sorted(set(text))
        index = {c: i for i, c in enumerate(chars)}
        ids = np.array([index[c] for c in text], dtype=np.uint16)
        split = int(len(ids) * TRAIN_FRACTION)
        ids[:split].tofile(tmp / TOKEN_FILES["train"])
        ids[split:].tofile(tmp / TOKEN_FILES["val"])
        (tmp / VOCAB_FILE).write_text(json.dumps(chars))
        return {"vocab_size": len(chars), "tokens": {"train": split, "val": len(ids) - split}}

    prepared = data_root(root) / "shakespeare" / "prepared-char"
    return prepared, prepare_once(prepared, expected, build)


def shakespeare(context: int = 128, root: str | None = None, source: str | None = None,
                **unused: object) -> TokenDataset:
    prepared, meta = prepare_shakespeare(root, source)
    return TokenDataset.prepared("shakespeare", prepared, meta, context)
