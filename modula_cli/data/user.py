"""Your data without editing the package: ``data.name: package.module:function``, as ``arch.name`` is.

The function gets the ``data`` config node (every key of your YAML, ``data.path`` included) and returns one of:

- a language dataset: ``{"train": ids, "test": ids, "vocab_size": int}``, ``ids`` 1-D integer arrays or tensors
  of token ids (a memory-mapped ``np.memmap`` stays on disk);
- an image dataset: ``{"train": Dataset, "test": Dataset, "classes": int}``, torch Datasets yielding
  ``(image tensor, label)``.

``TokenSplits`` and ``ImageSplits`` are the same fields as typed classes; any object with those attributes does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from ..plumbing.errors import cause_text
from ..plumbing.user_code import import_function, source_digest
from .base import TokenDataset
from .identity import combined, path_digest
from .images import SampleImageDataset
from .storage import DataUnavailable

LANGUAGE_FIELDS, IMAGE_FIELDS = ("train", "test", "vocab_size"), ("train", "test", "classes")


@dataclass
class TokenSplits:
    train: Any  # 1-D integer array or tensor of token ids
    test: Any
    vocab_size: int


@dataclass
class ImageSplits:
    train: Any  # torch Dataset of (image tensor, label)
    test: Any
    classes: int


def _fields(result: Any, names: tuple[str, ...]) -> dict[str, Any] | None:
    if isinstance(result, dict):
        return {n: result[n] for n in names} if all(n in result for n in names) else None
    return {n: getattr(result, n) for n in names} if all(hasattr(result, n) for n in names) else None


def _token_ids(path: str, split: str, ids: Any, vocab: int) -> np.ndarray:
    array = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise DataUnavailable(f"data.name={path!r}: its {split} split is a {array.dtype} array of shape "
                              f"{array.shape}; expected a 1-D array of integer token ids")
    if len(array) and (array.min() < 0 or array.max() >= vocab):
        bad = int(array.min()) if array.min() < 0 else int(array.max())
        raise DataUnavailable(f"data.name={path!r}: its {split} split holds token id {bad}, outside 0 … "
                              f"vocab_size - 1 = {vocab - 1}")
    return array


def dataset_from(path: str, result: Any, context: int | None) -> TokenDataset | SampleImageDataset:
    """The dataset a user's function returned, checked: a language or an image dataset, else one line saying
    what was expected."""
    if (language := _fields(result, LANGUAGE_FIELDS)) is not None:
        vocab = language["vocab_size"]
        if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
            raise DataUnavailable(f"data.name={path!r}: vocab_size={vocab!r}; expected an integer >= 1")
        if context is None:
            raise DataUnavailable(f"data.name={path!r} returned token ids: set data.context (tokens per sequence) in "
                                  f"its YAML")
        train, test = (_token_ids(path, split, language[split], vocab) for split in ("train", "test"))
        return TokenDataset(path, train, test, vocab_size=vocab, context=context, meta={"source": path})
    if (image := _fields(result, IMAGE_FIELDS)) is not None:
        classes = image["classes"]
        if not isinstance(classes, int) or isinstance(classes, bool) or classes < 2:
            raise DataUnavailable(f"data.name={path!r}: classes={classes!r}; expected an integer >= 2")
        return SampleImageDataset(path, image["train"], image["test"], classes, meta={"source": path})
    got = sorted(result) if isinstance(result, dict) else type(result).__name__
    raise DataUnavailable(f"data.name={path!r} returned {got}; expected a mapping with train, test and vocab_size "
                          f"(token ids) or train, test and classes (image Datasets)")


def user_dataset(name: str, /, context: int | None = None, **options: Any) -> TokenDataset | SampleImageDataset:
    """Call the user's function ``name`` with the data node (``name`` and ``context`` included) and check what it
    made."""
    function = import_function(name, "data.name", DataUnavailable)
    node = OmegaConf.create({"name": name, "context": context, **options})
    try:
        result = function(node)
    except DataUnavailable:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the user's function raised, said in one line
        raise DataUnavailable(f"data.name={name!r} raised {cause_text(error)}") from None
    return dataset_from(name, result, context)


def user_source_problem(name: str) -> str | None:
    """The function cannot be imported (checked before any run; it is called when the data is prepared)."""
    try:
        import_function(name, "data.name", DataUnavailable)
    except DataUnavailable as error:
        return str(error)
    return None


def user_identity(name: str, /, path: str | None = None, **unused: object) -> str | None:
    """The function's files and, where the config names a ``data.path``, what lies there."""
    return combined(source_digest(name), path_digest(str(path)) if path is not None else None)
