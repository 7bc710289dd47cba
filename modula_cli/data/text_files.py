"""``data=text_files``: your own corpus in a file, tokenised once into a cached token folder.

``data.path`` is a ``.txt`` (the whole file is one text), or a ``.jsonl`` / ``.parquet`` of documents whose text
is in ``data.text_field`` (each followed by the tokenizer's end-of-text id). ``data.tokenizer``: a tiktoken encoding
(``gpt2``, …), ``byte``, ``char`` (the corpus's own characters) or a local Hugging Face tokenizer folder. The test
split is ``data.val_path`` in the same format, else the last ``data.holdout`` of the tokens.

The cache folder is named by the file's content hash and the tokenizer: an edited corpus is tokenised again into
a new folder and never mixed with the old one, and concurrent jobs build it once (``storage.prepare_once``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..plumbing.signals import STOP
from .base import TokenDataset
from .identity import combined, path_digest
from .storage import TOKEN_FILES, VOCAB_FILE, DataUnavailable, data_root, prepare_once, prepared_sizes
from .tokenizers import TextTokenizer, text_tokenizer, tokenizer_problem, tokenizer_tag

FORMATS = (".txt", ".jsonl", ".parquet")
CHUNK_CHARACTERS = 2**22  # a long text is encoded a piece at a time, cut at line ends
Documents = Callable[[], Iterable[str]]  # a corpus that can be read more than once (a char tokenizer reads it twice)


@dataclass(frozen=True)
class Corpus:
    """A ``data=text_files`` config's corpus: its files, how they are read and tokenised, and its cache."""

    path: str | None = None
    val_path: str | None = None
    tokenizer: str = "gpt2"
    text_field: str = "text"
    holdout: float = 0.1
    root: str | None = None

    @classmethod
    def of(cls, **options: object) -> Corpus:
        return cls(**{f.name: options[f.name] for f in fields(cls) if f.name in options})

    def problem(self) -> str | None:
        """What is wrong with the files or the tokenizer before anything is read."""
        if self.path is None:
            return f"data=text_files needs data.path: a text file ({', '.join(FORMATS)})"
        for key, value in (("data.path", self.path), ("data.val_path", self.val_path)):
            if value is None:
                continue
            file = Path(str(value)).expanduser()
            if not file.is_file():
                return f"{key}={value}: no such file"
            if file.suffix not in FORMATS:
                return f"{key}={value}: a {file.suffix or 'suffix-less'} file; allowed: {', '.join(FORMATS)}"
            if file.stat().st_size == 0:
                return f"{key}={value} is empty"
        return tokenizer_problem(str(self.tokenizer))

    def identity(self) -> str | None:
        """The corpus's content and, for a tokenizer folder, its files."""
        if self.problem():
            return None
        tokenizer_folder = Path(str(self.tokenizer)).expanduser()
        return combined(path_digest(str(self.path)), path_digest(str(self.val_path)) if self.val_path else None,
                        path_digest(tokenizer_folder) if tokenizer_folder.is_dir() else None)

    def cache(self) -> tuple[Path, dict]:
        """The token folder of this corpus and tokenizer, and what its meta.json must say."""
        key = combined(path_digest(str(self.path)), path_digest(str(self.val_path)) if self.val_path else None,
                       self.text_field, "" if self.val_path else str(self.holdout))
        expected = {"dataset": "text_files", "source": str(Path(str(self.path)).expanduser().resolve()), "key": key,
                    "tokenizer": str(self.tokenizer)}
        return data_root(self.root) / "text_files" / f"{tokenizer_tag(str(self.tokenizer))}-{key}", expected

    def documents(self, path: str) -> Documents:
        return documents(Path(path).expanduser(), self.text_field)

    def build(self, folder: Path) -> dict:
        """Tokenise the corpus into ``folder``: its metadata."""
        val = self.documents(str(self.val_path)) if self.val_path else None
        return write_token_files(self.documents(str(self.path)), val, str(self.tokenizer), self.holdout, folder)


def _text(file: Path) -> str:
    data = file.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataUnavailable(f"data=text_files: {file} is not UTF-8 text (byte 0x{data[error.start]:02x} at byte "
                              f"offset {error.start}); save it as UTF-8") from None


def _jsonl(file: Path, field: str) -> Iterator[str]:
    with open(file, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise DataUnavailable(f"data=text_files: {file}, line {number}, is not a UTF-8 JSON object ({error})"
                                      ) from None
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                raise DataUnavailable(f"data=text_files: {file}, line {number}, has no text field {field!r}; set "
                                      f"data.text_field to the key that holds each document's text")
            yield record[field]


def _parquet(file: Path, field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(file)
    if field not in table.schema_arrow.names:
        raise DataUnavailable(f"data=text_files: {file} has no column {field!r} (columns: "
                              f"{', '.join(table.schema_arrow.names)}); set data.text_field")
    for batch in table.iter_batches(columns=[field]):
        yield from (text for text in batch.column(0).to_pylist() if text)


def documents(file: Path, field: str) -> Documents:
    """The file's documents, readable again and again: a .txt is one."""
    if file.suffix == ".txt":
        return lambda: [_text(file)]
    if file.suffix == ".jsonl":
        return lambda: _jsonl(file, field)
    return lambda: _parquet(file, field)


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of about ``CHUNK_CHARACTERS``, cut after a line end (so no token straddles a cut where
    the text has one)."""
    start = 0
    while start < len(text):
        end = min(len(text), start + CHUNK_CHARACTERS)
        if end < len(text) and (cut := text.rfind("\n", start, end)) > start:
            end = cut + 1
        yield text[start:end]
        start = end


def encode_all(docs: Iterable[str], tokenizer: TextTokenizer) -> np.ndarray:
    """The token ids of every document in order, each followed by end-of-text where the tokenizer has one."""
    dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
    parts = []
    for doc in docs:
        for piece in _pieces(doc):
            STOP.stop_here()  # a stop during a long tokenisation ends it here, leaving no cache behind
            parts.append(np.asarray(tokenizer.encode(piece), dtype=dtype))
        if tokenizer.eot is not None:
            parts.append(np.asarray([tokenizer.eot], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def write_token_files(train: Documents, val: Documents | None, tokenizer_name: str, holdout: float,
                      folder: Path) -> dict:
    """Tokenise the corpus into ``folder``'s token files (the test split: ``val``'s documents, else the last
    ``holdout`` of the train tokens) and return what ``meta.json`` records of them."""
    corpus = (lambda: [*train(), *val()]) if val is not None else train
    tokenizer = text_tokenizer(tokenizer_name, corpus)
    ids = encode_all(train(), tokenizer)
    if val is not None:
        splits = {"train": ids, "val": encode_all(val(), tokenizer)}
    else:
        cut = len(ids) - max(1, round(holdout * len(ids)))
        splits = {"train": ids[:cut], "val": ids[cut:]}
    for split, tokens in splits.items():
        tokens.tofile(folder / TOKEN_FILES[split])
    if tokenizer.vocab:
        (folder / VOCAB_FILE).write_text(json.dumps(tokenizer.vocab))
    return {"vocab_size": tokenizer.vocab_size, "eot_token": tokenizer.eot, "format": ids.dtype.name,
            "tokens": {split: len(tokens) for split, tokens in splits.items()}}


def corpus_functions(corpus: type, name: str) -> dict[str, Callable[..., Any]]:
    """The registry's functions of a format that tokenises a corpus into a cache (``Corpus``, ``hf_dataset.HubCorpus``):
    each makes the corpus of the ``data.*`` options, which says its problem, identity, cache and how it is built."""

    def prepare(**options: object) -> tuple[Path, dict]:
        corpus_of = corpus.of(**options)
        if problem := corpus_of.problem():
            raise DataUnavailable(problem)
        folder, expected = corpus_of.cache()
        return folder, prepare_once(folder, expected, corpus_of.build)

    def build(context: int = 128, **options: object) -> TokenDataset:
        folder, meta = prepare(**options)
        return TokenDataset.prepared(name, folder, meta, context)

    def split_sizes(**options: object) -> dict[str, int] | None:  # None until tokenised
        corpus_of = corpus.of(**options)
        return None if corpus_of.problem() else prepared_sizes(corpus_of.cache()[0])

    return {"build": build, "split_sizes": split_sizes, "prepare": prepare,
            "source_problem": lambda **options: corpus.of(**options).problem(),
            "identity": lambda **options: corpus.of(**options).identity()}
