"""The next training batch, prepared in a background thread while this step computes.

Batches depend only on (seed, step), so prefetching never changes a number."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch import Tensor

Batch = tuple[Tensor, Tensor]


class Prefetcher:
    def __init__(self, batch_for: Callable[[int], Batch], start: int, steps: int):
        self._batch_for, self._steps = batch_for, steps
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches")
        self._next: tuple[int, Future] | None = (start, self._pool.submit(batch_for, start)) if start < steps else None

    def get(self, step: int) -> Batch:
        if self._next is None or self._next[0] != step:
            batch = self._batch_for(step)
        else:
            batch = self._next[1].result()
        self._next = (step + 1, self._pool.submit(self._batch_for, step + 1)) if step + 1 < self._steps else None
        return batch

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
