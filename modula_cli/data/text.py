"""Tokenised text corpora from the Hugging Face hub or a local folder: TinyStories and OpenWebText.

Documents are encoded with ``encode_ordinary`` plus end-of-text, in parallel, into flat uint16 files.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import numpy as np

from ..plumbing import environment
from ..plumbing.signals import STOP
from .base import TokenDataset
from .storage import TOKEN_FILES, DataUnavailable, cause_text, data_root, prepare_once, prepared_sizes, reachable
from .tokenizers import get_tokenizer

LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text"}
HOLDOUT_SEED = 2357
TINYSTORIES, OPENWEBTEXT = "roneneldan/TinyStories", "Skylion007/openwebtext"


def _local_files(folder: Path, split: str) -> list[str]:
    return sorted(str(p) for p in folder.iterdir() if p.stem.split(".")[0] == split and p.suffix in LOCAL_FORMATS)


def local_source(source: str) -> Path | None:
    """The folder a path-like source names (absolute, ./, ../, ~, or an existing path); ``None`` for a hub id."""
    path = Path(source).expanduser()
    return path if source.startswith(("/", "./", "../", "~")) or path.exists() else None


def text_source_problem(source: str | None = None, **unused: object) -> str | None:
    folder = local_source(str(source)) if source else None
    if folder is not None and not folder.is_dir():
        return f"data.source={source}: no such folder (a local source is a folder of train.* / validation.* files)"
    return None


def _local_splits(name: str, folder: Path, has_validation: bool) -> dict[str, list[str]]:
    """The files of each split in a local source folder (``DataUnavailable`` when a split has none)."""
    splits = {"train": _local_files(folder, "train")}
    if has_validation:
        splits["validation"] = _local_files(folder, "validation")
    missing = [s for s, files in splits.items() if not files]
    if missing:
        raise DataUnavailable(f"data={name}: {folder} has no {' or '.join(missing)} file; put train.* (and "
                              f"validation.* where the dataset has one) with a suffix in {sorted(LOCAL_FORMATS)} "
                              f"there, or set data.source to a folder that has them")
    return splits


def _load_local(splits: dict[str, list[str]]):
    import datasets

    suffixes = {Path(f).suffix for files in splits.values() for f in files}
    if len({LOCAL_FORMATS[s] for s in suffixes}) != 1:
        raise ValueError(f"mix of file formats {sorted(suffixes)} in {Path(splits['train'][0]).parent}; use one "
                         f"format per folder")
    builder = LOCAL_FORMATS[suffixes.pop()]
    # Plain text: one document per blank-line-separated paragraph.
    extra = {"sample_by": "paragraph"} if builder == "text" else {}
    loaded = datasets.load_dataset(builder, data_files=splits, **extra)
    if builder == "text":  # separators are not part of a document
        loaded = loaded.map(lambda b: {"text": [t.strip() for t in b["text"]]}, batched=True)
        loaded = loaded.filter(lambda b: [bool(t) for t in b["text"]], batched=True)
    return loaded


@contextmanager
def _hub_offline(offline: bool) -> Iterator[None]:
    """The HF libraries read their offline switch once, at import: set it for one load, then restore it
    (process-wide: taken only while the dataset is prepared in the main thread, before any training)."""
    import datasets
    from huggingface_hub import constants

    with ExitStack() as stack:
        if offline:
            for module, key in ((constants, environment.HF_HUB_OFFLINE), (datasets.config, environment.HF_HUB_OFFLINE),
                                (datasets.config, environment.HF_DATASETS_OFFLINE)):
                if hasattr(module, key):  # which of them a version reads differs
                    stack.enter_context(mock.patch.object(module, key, True))
        yield


def load_hub(source: str):
    """A hub dataset, from the hub or, when it cannot be reached, from the Hugging Face cache. Offline the
    hub client retries for about 25 s and prints each retry: a short connection test goes first."""
    import datasets
    from huggingface_hub import constants

    # which offline switch the user set, by its own name (the libraries read them from the environment)
    told = next((name for name, on in (
        (environment.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE),
        (environment.HF_DATASETS_OFFLINE, getattr(datasets.config, environment.HF_DATASETS_OFFLINE, False))) if on),
        None)
    offline = told is not None or not reachable(constants.ENDPOINT)
    try:
        with _hub_offline(offline):
            return datasets.load_dataset(source)
    except Exception as error:  # noqa: BLE001 - the hub client's errors vary by version and cause
        reason = cause_text(error)
        if offline:
            host = urllib.parse.urlsplit(constants.ENDPOINT).hostname
            why = f"{told} is set" if told else f"{host} cannot be reached"
            reason = f"{why} and it is not in the Hugging Face cache"
        raise DataUnavailable(f"the hub dataset {source!r} could not be loaded ({reason})") from error


def _unprepared(name: str, folder: Path, tokenizer: str, failure: DataUnavailable) -> DataUnavailable:
    """The one line for a text dataset whose tokens are not prepared and cannot be: what failed, and the fixes."""
    byte = "" if tokenizer == "byte" else " (data.tokenizer=byte downloads nothing)"
    return DataUnavailable(f"data={name}: no prepared tokens in {folder}, and {failure}; run "
                           f"`modula-prepare-data {name}` with the same data.* options on a machine with internet "
                           f"access and copy its data.root here, or set data.source to a local folder of train.* / "
                           f"validation.* files{byte}")


def _splits(loaded, has_validation: bool, holdout: float, max_docs: int | None):
    """{'train': Dataset, 'val': Dataset} with a ``text`` column, from the loaded source's splits."""
    train = loaded["train"]
    if has_validation:
        val = loaded["validation"]
    else:
        parts = train.train_test_split(test_size=holdout, seed=HOLDOUT_SEED, shuffle=True)
        train, val = parts["train"], parts["test"]
    if max_docs:
        train = train.select(range(min(max_docs, len(train))))
        val = val.select(range(min(max(1, max_docs // 10), len(val))))
    return {"train": train, "val": val}


def _write_tokens(dataset, tokenizer_name: str, path: Path, num_proc: int) -> int:
    def encode(batch):
        STOP.stop_here()  # a stop the dataset library caught on its way out
        enc = get_tokenizer(tokenizer_name)
        ids = [enc.encode_ordinary(text) + [enc.eot_token] for text in batch["text"]]
        return {"ids": ids, "len": [len(x) for x in ids]}

    tokenized = dataset.map(encode, batched=True, remove_columns=dataset.column_names,
                            num_proc=num_proc if num_proc > 1 and len(dataset) >= num_proc else None,
                            desc=f"tokenizing {path.stem}")
    total = int(np.sum(tokenized["len"], dtype=np.int64))
    tokens = np.memmap(path, dtype=np.uint16, mode="w+", shape=(total,))
    position = 0
    for batch in tokenized.iter(batch_size=8192):
        STOP.stop_here()
        ids = np.concatenate([np.asarray(x, dtype=np.uint16) for x in batch["ids"]])
        tokens[position:position + len(ids)] = ids
        position += len(ids)
    tokens.flush()
    return total


def _cache_folder(name: str, source: str, tokenizer: str, root: str | None, max_docs: int | None,
                  holdout: float) -> Path:
    key = hashlib.sha256(f"{source}|{max_docs}|{holdout}".encode()).hexdigest()[:10]
    return data_root(root) / name / f"{tokenizer}-{key}"


def _prepared_sizes(name: str, default_source: str, source: str | None = None, tokenizer: str = "gpt2",
                    root: str | None = None, max_docs: int | None = None, holdout: float = 0.0005,
                    **unused: object) -> dict[str, int] | None:
    """Tokens per split of an already prepared cache (read from its meta.json), else ``None``."""
    return prepared_sizes(_cache_folder(name, str(source or default_source), tokenizer, root, max_docs, holdout))


def prepare_text(name: str, default_source: str, has_validation: bool, source: str | None = None,
                 tokenizer: str = "gpt2", root: str | None = None, num_proc: int = 0, max_docs: int | None = None,
                 holdout: float = 0.0005, **unused: object) -> tuple[Path, dict]:
    """The token files of a text dataset, prepared when absent: (their folder, metadata). Neither the tokenizer
    nor the source is touched when they are already prepared (a compute node may have neither)."""
    source = str(source or default_source)
    if problem := text_source_problem(source):
        raise DataUnavailable(f"data={name}: {problem}")
    folder = _cache_folder(name, source, tokenizer, root, max_docs, holdout)
    expected = {"dataset": name, "source": source, "tokenizer": tokenizer, "max_docs": max_docs,
                "holdout": None if has_validation else holdout, "format": "uint16"}
    workers = num_proc or max(1, (os.cpu_count() or 2) // 2)

    def build(tmp: Path) -> dict:
        local = local_source(source)
        files = _local_splits(name, local, has_validation) if local is not None else None  # its own one line
        try:
            enc = get_tokenizer(tokenizer)  # first: quick to fail, where the source may take long to load
            loaded = _load_local(files) if files else load_hub(source)
        except DataUnavailable as error:
            raise _unprepared(name, folder, tokenizer, error) from error
        if enc.n_vocab > 2**16:
            raise ValueError(f"tokenizer {tokenizer} has {enc.n_vocab} tokens; uint16 token files hold at most 65536")
        splits = _splits(loaded, has_validation, holdout, max_docs)
        counts = {split: _write_tokens(ds, tokenizer, tmp / TOKEN_FILES[split], workers)
                  for split, ds in splits.items()}
        return {"tokens": counts, "documents": {split: len(ds) for split, ds in splits.items()},
                "vocab_size": enc.n_vocab, "eot_token": enc.eot_token}

    return folder, prepare_once(folder, expected, build)


def load_text_dataset(name: str, default_source: str, has_validation: bool, context: int,
                      **options: object) -> TokenDataset:
    folder, meta = prepare_text(name, default_source, has_validation, **options)
    return TokenDataset.prepared(name, folder, meta, context)


def tinystories_split_sizes(**options: object) -> dict[str, int] | None:
    return _prepared_sizes("tinystories", TINYSTORIES, **options)


def openwebtext_split_sizes(**options: object) -> dict[str, int] | None:
    return _prepared_sizes("openwebtext", OPENWEBTEXT, **options)


def prepare_tinystories(**options: object) -> None:
    prepare_text("tinystories", TINYSTORIES, has_validation=True, **options)


def prepare_openwebtext(**options: object) -> None:
    prepare_text("openwebtext", OPENWEBTEXT, has_validation=False, **options)


def tinystories(context: int = 128, **options) -> TokenDataset:
    return load_text_dataset("tinystories", TINYSTORIES, has_validation=True, context=context, **options)


def openwebtext(context: int = 128, **options) -> TokenDataset:
    return load_text_dataset("openwebtext", OPENWEBTEXT, has_validation=False, context=context,
                             **options)
