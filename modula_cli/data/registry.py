"""The dataset registry: for every dataset a config can name, how to build it, its kind, and what can be known
of it cheaply before any run starts (split sizes, a missing local source, the identity of a user's files).

Your own data needs no entry: ``data.name: package.module:function`` (``user.py``), or one of the formats that
read your files (``tokens``, ``text_files``, ``hf_dataset``, ``image_folder``). A new built-in dataset is one
function returning a ``TokenDataset`` or ``ImageDataset``, one entry here and one YAML file in ``configs/data/``.
Data that is missing, cannot be fetched or cannot be read as its dataset reads it raises ``DataUnavailable``,
whose message is one line (what is wrong, where, and how to fix it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..plumbing.user_code import is_import_path
from .base import TokenDataset
from .cifar10 import ImageDataset, cifar10, prepare_cifar10
from .hf_dataset import HubCorpus
from .images import SampleImageDataset, image_folder, image_folder_identity, image_folder_source_problem
from .shakespeare import prepare_shakespeare, shakespeare, shakespeare_split_sizes
from .storage import DataUnavailable, cause_text
from .text import (openwebtext, openwebtext_split_sizes, prepare_openwebtext, prepare_tinystories, text_source_problem,
                   tinystories, tinystories_split_sizes)
from .text_files import Corpus, corpus_functions
from .tokens import tokens, tokens_identity, tokens_source_problem, tokens_split_sizes
from .user import user_dataset, user_identity, user_source_problem

Dataset = TokenDataset | ImageDataset | SampleImageDataset


def _nothing_known(**options: object) -> None:
    return None


@dataclass(frozen=True)
class DatasetEntry:
    build: Callable[..., Dataset]
    kind: str | None  # "language" (token streams, data.context applies) or "image"; None: known once built
    # Tokens per split when known without preparing anything (None: not yet known), and a problem with
    # the configured source (a missing local folder), both checked before any run starts.
    split_sizes: Callable[..., dict[str, int] | None] = _nothing_known
    source_problem: Callable[..., str | None] = _nothing_known
    # Makes the data available (downloaded, prepared) without loading it; None: building it is as cheap.
    prepare: Callable[..., object] | None = None
    # A hash of the user's files the data is read from (None: the settings name the data): part of a run's
    # fingerprint, so that a changed corpus is another run.
    identity: Callable[..., str | None] = _nothing_known


DATASETS: dict[str, DatasetEntry] = {
    "shakespeare": DatasetEntry(shakespeare, "language", shakespeare_split_sizes, prepare=prepare_shakespeare),
    "tinystories": DatasetEntry(tinystories, "language", tinystories_split_sizes, text_source_problem,
                                prepare_tinystories),
    "openwebtext": DatasetEntry(openwebtext, "language", openwebtext_split_sizes, text_source_problem,
                                prepare_openwebtext),
    "cifar10": DatasetEntry(cifar10, "image", prepare=prepare_cifar10),
    # your own files, in a format that needs no code
    "tokens": DatasetEntry(tokens, "language", tokens_split_sizes, tokens_source_problem, identity=tokens_identity),
    "text_files": DatasetEntry(kind="language", **corpus_functions(Corpus, "text_files")),
    "hf_dataset": DatasetEntry(kind="language", **corpus_functions(HubCorpus, "hf_dataset")),
    "image_folder": DatasetEntry(image_folder, "image", source_problem=image_folder_source_problem,
                                 identity=image_folder_identity),
}
CONFIG_ONLY_KEYS = ("name", "max_context")  # checked by validation, not passed to the builders


def dataset_entry(name: str) -> DatasetEntry:
    """The registered dataset ``name``, or a user's data function named by import path."""
    if name in DATASETS:
        return DATASETS[name]
    if is_import_path(name):
        return DatasetEntry(functools.partial(user_dataset, name), None,
                            source_problem=lambda **options: user_source_problem(name),
                            identity=functools.partial(user_identity, name))
    raise ValueError(f"unknown dataset {name!r}; registered: {', '.join(DATASETS)}, or an import path "
                     f"package.module:function of your own")


def data_identity(name: str, /, **options: object) -> str | None:
    """The hash of the files ``name`` reads with these options (None for the built-in datasets, and for a name that
    is no dataset: validation names it)."""
    if name not in DATASETS and not is_import_path(name):
        return None
    return dataset_entry(name).identity(**_builder_options(options))


def _builder_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k not in CONFIG_ONLY_KEYS}


def build_dataset(name: str, /, **options) -> Dataset:
    """The dataset ``name`` with its ``data.*`` options (the whole ``data`` group may be passed: its
    ``name`` and ``max_context`` are ignored); ``DataUnavailable`` when its data is missing and cannot be
    fetched."""
    return dataset_entry(name).build(**_builder_options(options))


def prepare_dataset(name: str, /, **options) -> None:
    """Make ``name``'s data available (download, prepare the cache) without loading it, or raise
    ``DataUnavailable``: e.g. once before a sweep launches its jobs, with the options of ``build_dataset``.
    Cheap when the data is already here (a look at the files and their checksums)."""
    entry = dataset_entry(name)
    (entry.prepare or entry.build)(**_builder_options(options))


__all__ = ["DATASETS", "DataUnavailable", "Dataset", "DatasetEntry", "ImageDataset", "SampleImageDataset",
           "TokenDataset", "build_dataset", "cause_text", "data_identity", "dataset_entry", "prepare_dataset"]
