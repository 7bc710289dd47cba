"""The dataset registry: for every dataset a config can name, how to build it, its kind, and what can be known
of it cheaply before any run starts (split sizes, a missing local source).

A new dataset is one function returning a ``TokenDataset`` or ``ImageDataset``, one entry here and one
YAML file in ``configs/data/``. Data that is missing and cannot be fetched raises ``DataUnavailable``, whose
message is one line (what is missing, where it was looked for, how to get it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import TokenDataset
from .cifar10 import ImageDataset, cifar10, prepare_cifar10
from .shakespeare import prepare_shakespeare, shakespeare, shakespeare_split_sizes
from .storage import DataUnavailable, cause_text
from .text import (openwebtext, openwebtext_split_sizes, prepare_openwebtext, prepare_tinystories, text_source_problem,
                   tinystories, tinystories_split_sizes)

Dataset = TokenDataset | ImageDataset


def _nothing_known(**options: object) -> None:
    return None


@dataclass(frozen=True)
class DatasetEntry:
    build: Callable[..., Dataset]
    kind: str  # "language" (token streams, data.context applies) or "image"
    # Tokens per split when known without preparing anything (None: not yet known), and a problem with
    # the configured source (a missing local folder), both checked before any run starts.
    split_sizes: Callable[..., dict[str, int] | None] = _nothing_known
    source_problem: Callable[..., str | None] = _nothing_known
    # Makes the data available (downloaded, prepared) without loading it; None: building it is as cheap.
    prepare: Callable[..., object] | None = None


DATASETS: dict[str, DatasetEntry] = {
    "shakespeare": DatasetEntry(shakespeare, "language", shakespeare_split_sizes, prepare=prepare_shakespeare),
    "tinystories": DatasetEntry(tinystories, "language", tinystories_split_sizes, text_source_problem,
                                prepare_tinystories),
    "openwebtext": DatasetEntry(openwebtext, "language", openwebtext_split_sizes, text_source_problem,
                                prepare_openwebtext),
    "cifar10": DatasetEntry(cifar10, "image", prepare=prepare_cifar10),
}
CONFIG_ONLY_KEYS = ("name", "max_context")  # checked by validation, not passed to the builders


def _entry(name: str) -> DatasetEntry:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; registered: {', '.join(DATASETS)}")
    return DATASETS[name]


def _builder_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k not in CONFIG_ONLY_KEYS}


def build_dataset(name: str, /, **options) -> Dataset:
    """The dataset ``name`` with its ``data.*`` options (the whole ``data`` group may be passed: its
    ``name`` and ``max_context`` are ignored); ``DataUnavailable`` when its data is missing and cannot be
    fetched."""
    return _entry(name).build(**_builder_options(options))


def prepare_dataset(name: str, /, **options) -> None:
    """Make ``name``'s data available (download, prepare the cache) without loading it, or raise
    ``DataUnavailable``: e.g. once before a sweep launches its jobs, with the options of ``build_dataset``.
    Cheap when the data is already here (a look at the files and their checksums)."""
    entry = _entry(name)
    (entry.prepare or entry.build)(**_builder_options(options))


__all__ = ["DATASETS", "DataUnavailable", "Dataset", "DatasetEntry", "ImageDataset", "TokenDataset", "build_dataset",
           "cause_text", "prepare_dataset"]
