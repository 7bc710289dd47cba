"""``data=tokens``: token files as nanoGPT's ``prepare.py`` writes them, ``train.bin`` and ``val.bin`` in one folder
(``data.path``): flat arrays of token ids, uint16 or uint32, memory-mapped and never loaded whole.

The vocabulary size is ``data.vocab_size``, else the ``vocab_size`` of a ``meta.json`` or nanoGPT's ``meta.pkl``
beside them. The pickle is read with no code at all: it may hold only plain values (dicts, lists, strings,
numbers), as the CIFAR reader allows only arrays.
"""

from __future__ import annotations

import functools
import io
import json
import pickle
from pathlib import Path

import numpy as np

from .base import TokenDataset
from .identity import combined, path_digest
from .storage import META_FILE, TOKEN_FILES, DataUnavailable

SPLIT_FILES = {"train": TOKEN_FILES["train"], "validation": TOKEN_FILES["val"]}  # nanoGPT's names, as ours
DTYPES = ("auto", "uint16", "uint32")
META_FILES = (META_FILE, "meta.pkl")  # nanoGPT writes meta.pkl; either may say vocab_size
CHUNK_TOKENS = 2**24  # the largest id is found a chunk at a time: a corpus is never read into memory whole


class _PlainValues(pickle.Unpickler):
    """A pickle of plain values only: one that names any class or function (and so could run code) is refused."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"it names {module}.{name}; a meta.pkl may hold only plain values")


def _folder(path: str | None) -> Path:
    return Path(str(path)).expanduser()


def tokens_source_problem(path: str | None = None, dtype: str = "auto", **unused: object) -> str | None:
    """What is wrong with ``data.path`` before anything is read: missing, or without both token files."""
    if path is None:
        return "data=tokens needs data.path: a folder holding train.bin and val.bin (nanoGPT's prepare.py output)"
    folder = _folder(path)
    if not folder.is_dir():
        return f"data.path={path}: no such folder (data=tokens reads train.bin and val.bin from a folder)"
    missing = [f for f in SPLIT_FILES.values() if not (folder / f).is_file()]
    if missing:
        return f"data.path={path} has no {' or '.join(missing)}; data=tokens reads train.bin and val.bin there"
    return None


def _meta(folder: Path) -> dict:
    """``meta.json`` or ``meta.pkl`` beside the token files (empty when neither is there)."""
    for name in META_FILES:
        file = folder / name
        if not file.is_file():
            continue
        try:
            meta = json.loads(file.read_text()) if name.endswith(".json") else \
                _PlainValues(io.BytesIO(file.read_bytes())).load()
        except (pickle.UnpicklingError, json.JSONDecodeError, EOFError, ValueError, UnicodeDecodeError) as error:
            raise DataUnavailable(f"data=tokens: {file} is refused ({error}); it should hold vocab_size, as "
                                  f"nanoGPT's prepare.py writes it") from None
        if not isinstance(meta, dict):
            raise DataUnavailable(f"data=tokens: {file} holds a {type(meta).__name__}, not a mapping with vocab_size")
        return meta
    return {}


def _vocab_and_dtype(folder: Path, vocab_size: int | None, dtype: str) -> tuple[int, np.dtype]:
    meta = _meta(folder)
    vocab = vocab_size or meta.get("vocab_size")
    if not isinstance(vocab, int) or vocab < 1:
        raise DataUnavailable(f"data=tokens: the vocabulary size of {folder} is not known; set data.vocab_size, or "
                              f"put a meta.json or meta.pkl with vocab_size beside the token files")
    if dtype == "auto":
        dtype = str(meta.get("dtype") or ("uint16" if vocab <= 2**16 else "uint32"))
    if dtype not in DTYPES[1:]:
        raise DataUnavailable(f"data.dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
    return vocab, np.dtype(dtype)


def _token_count(file: Path, dtype: np.dtype) -> int:
    size = file.stat().st_size
    if size % dtype.itemsize:
        raise DataUnavailable(f"data=tokens: {file} has {size} bytes, not a whole number of {dtype.name} token ids "
                              f"({dtype.itemsize} bytes each); set data.dtype to the type it was written with")
    return size // dtype.itemsize


def tokens_split_sizes(path: str | None = None, vocab_size: int | None = None, dtype: str = "auto",
                       **unused: object) -> dict[str, int] | None:
    """Tokens per split, from the files' sizes (nothing is read)."""
    if tokens_source_problem(path):
        return None
    folder = _folder(path)
    _, numpy_dtype = _vocab_and_dtype(folder, vocab_size, dtype)
    return {split: _token_count(folder / file, numpy_dtype) for split, file in SPLIT_FILES.items()}


@functools.lru_cache(maxsize=16)
def _largest_id(file: str, dtype: str, size: int, mtime_ns: int) -> int:
    tokens = np.memmap(file, dtype=dtype, mode="r")
    return max((int(tokens[i:i + CHUNK_TOKENS].max()) for i in range(0, len(tokens), CHUNK_TOKENS)), default=-1)


def check_ids(file: Path, tokens: np.ndarray, vocab: int) -> None:
    """Every id of a token file below the vocabulary size (an embedding lookup would fail mid-run otherwise)."""
    stat = file.stat()
    largest = _largest_id(str(file.resolve()), tokens.dtype.name, stat.st_size, stat.st_mtime_ns)
    if largest >= vocab:
        raise DataUnavailable(f"data=tokens: {file} holds token id {largest}, not below the vocabulary size {vocab}; "
                              f"set data.vocab_size to the tokenizer's (or fix the meta file)")


def tokens(path: str | None = None, context: int = 128, vocab_size: int | None = None, dtype: str = "auto",
           **unused: object) -> TokenDataset:
    if problem := tokens_source_problem(path):
        raise DataUnavailable(problem)
    folder = _folder(path)
    vocab, numpy_dtype = _vocab_and_dtype(folder, vocab_size, dtype)
    splits = []
    for file in SPLIT_FILES.values():
        _token_count(folder / file, numpy_dtype)
        ids = np.memmap(folder / file, dtype=numpy_dtype, mode="r")
        check_ids(folder / file, ids, vocab)
        splits.append(ids)
    return TokenDataset("tokens", *splits, vocab_size=vocab, context=context,
                        meta={"source": str(folder.resolve()), "dtype": numpy_dtype.name})


def tokens_identity(path: str | None = None, **unused: object) -> str | None:
    """The hash of the token files and the meta file beside them."""
    if path is None:
        return None
    folder = _folder(path)
    return combined(*(path_digest(folder / f) for f in (*SPLIT_FILES.values(), *META_FILES)))
