"""An error said in one line: library errors can run over many lines and wrap each other."""

from __future__ import annotations


def cause_text(error: BaseException, innermost: bool = False, limit: int = 200) -> str:
    """``Type: first line of its message``, shortened: library errors can run over many lines. ``innermost``:
    of the error at the root of its chain (a network library wraps "Name or service not known" three times)."""
    for _ in range(20 if innermost else 0):  # bounded: a chain can loop
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"
