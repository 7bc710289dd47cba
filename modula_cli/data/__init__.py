"""Dataset registry: ``build_dataset(name, **options)`` for every dataset a config can name.

A new dataset is one function returning a ``TokenDataset`` or ``ImageDataset`` plus one line here and one
YAML file in ``configs/data/``.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import TokenDataset
from .cifar10 import ImageDataset, cifar10
from .shakespeare import shakespeare
from .text import openwebtext, tinystories

Dataset = TokenDataset | ImageDataset

DATASETS: dict[str, Callable[..., Dataset]] = {
    "shakespeare": shakespeare,
    "tinystories": tinystories,
    "openwebtext": openwebtext,
    "cifar10": cifar10,
}


def build_dataset(name: str, **options) -> Dataset:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; registered: {', '.join(DATASETS)}")
    return DATASETS[name](**options)


__all__ = ["DATASETS", "Dataset", "ImageDataset", "TokenDataset", "build_dataset"]
