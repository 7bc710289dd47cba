"""Counts and durations in the words people write them: "1 run", "2 runs", "3m07s"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "run")`` → "1 run", ``counted(3, "run")`` → "3 runs"; ``plural`` for irregular nouns."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def duration_text(seconds: float) -> str:
    """``3m07s``, or ``2h05m`` from an hour on."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
