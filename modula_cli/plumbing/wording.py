"""Counts in the words people write them: "1 run", "2 runs"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "run")`` → "1 run", ``counted(3, "run")`` → "3 runs"; ``plural`` for irregular nouns."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
