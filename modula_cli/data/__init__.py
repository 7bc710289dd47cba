"""Dataset registry: for every dataset a config can name, how to build it, its kind, and what can be known
of it cheaply before any run starts (split sizes, a missing local source).

A new dataset is one function returning a ``TokenDataset`` or ``ImageDataset``, one entry here and one
YAML file in ``configs/data/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import TokenDataset
from .cifar10 import ImageDataset, cifar10
from .shakespeare import shakespeare, shakespeare_split_sizes
from .text import openwebtext, openwebtext_split_sizes, text_source_problem, tinystories, tinystories_split_sizes

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


DATASETS: dict[str, DatasetEntry] = {
    "shakespeare": DatasetEntry(shakespeare, "language", shakespeare_split_sizes),
    "tinystories": DatasetEntry(tinystories, "language", tinystories_split_sizes, text_source_problem),
    "openwebtext": DatasetEntry(openwebtext, "language", openwebtext_split_sizes, text_source_problem),
    "cifar10": DatasetEntry(cifar10, "image"),
}
CONFIG_ONLY_KEYS = ("name", "max_context")  # checked by validation, not passed to the builders


def build_dataset(name: str, **options) -> Dataset:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; registered: {', '.join(DATASETS)}")
    return DATASETS[name].build(**{k: v for k, v in options.items() if k not in CONFIG_ONLY_KEYS})


__all__ = ["DATASETS", "Dataset", "DatasetEntry", "ImageDataset", "TokenDataset", "build_dataset"]
