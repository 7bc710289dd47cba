"""What the training loop sees of a dataset: reproducible training batches and a fixed evaluation set."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .storage import TOKEN_FILES, DataUnavailable

EVAL_SEED = 1234  # evaluation batches never depend on the run's seed, so a sweep shares one test set


def batch_rng(*key: int) -> np.random.Generator:
    """A generator determined by the key alone, e.g. (seed, step): resuming needs no saved RNG state."""
    return np.random.default_rng([int(k) for k in key])


def epoch_batch(step: int, batch_size: int, count: int, seed: int, name: str) -> np.ndarray:
    """The sample indices of ``step``'s batch: each epoch a fresh permutation of ``count`` samples (from the seed
    and the epoch alone), cut into batches without replacement."""
    if batch_size > count:
        raise ValueError(f"train.batch_size={batch_size} exceeds the {count} training samples of {name}")
    epoch, position = divmod(step, count // batch_size)
    return batch_rng(seed, epoch).permutation(count)[position * batch_size:(position + 1) * batch_size]


@dataclass
class TokenDataset:
    """Flat token streams (integer arrays, memory-mapped files or in memory); a sample is a random window of
    context + 1 tokens."""

    name: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    context: int
    meta: dict = field(default_factory=dict)
    kind: str = "language"

    @classmethod
    def prepared(cls, name: str, folder: Path, meta: dict, context: int) -> TokenDataset:
        """A prepared folder's token files (``storage.TOKEN_FILES``, of ``meta["format"]``: uint16 unless it says
        uint32), memory-mapped: never loaded whole."""
        dtype = np.dtype(meta.get("format", "uint16"))
        train, val = (np.memmap(folder / TOKEN_FILES[split], dtype=dtype, mode="r") for split in ("train", "val"))
        return cls(name, train, val, vocab_size=meta["vocab_size"], context=context, meta=meta)

    def __post_init__(self) -> None:
        for split, tokens in (("train", self.train), ("validation", self.val)):
            if len(tokens) < self.context + 1:
                raise DataUnavailable(f"data.context={self.context} needs at least {self.context + 1} tokens, but the "
                                 f"{split} split of {self.name} has {len(tokens)}; use a shorter context")

    def _windows(self, tokens: np.ndarray, rng: np.random.Generator, batch_size: int,
                 device: torch.device | str) -> tuple[Tensor, Tensor]:
        starts = rng.integers(0, len(tokens) - self.context, size=batch_size)
        offsets = np.arange(self.context + 1)
        windows = torch.from_numpy(tokens[starts[:, None] + offsets].astype(np.int64))
        windows = windows.to(device, non_blocking=True)
        return windows[:, :-1], windows[:, 1:]

    def train_batch(self, step: int, batch_size: int, seed: int,
                    device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        return self._windows(self.train, batch_rng(seed, step), batch_size, device)

    def eval_batches(self, num_batches: int, batch_size: int,
                     device: torch.device | str = "cpu") -> list[tuple[Tensor, Tensor]]:
        return [self._windows(self.val, batch_rng(EVAL_SEED, i), batch_size, device) for i in range(num_batches)]

    def describe(self) -> str:
        return (f"{self.name}: vocab {self.vocab_size}, {len(self.train):,} train / {len(self.val):,} validation "
                f"tokens, context {self.context}")
