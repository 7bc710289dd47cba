"""Checkpoints: a run's whole state in one file, written atomically, read back only after validation.

A checkpoint that cannot be read (truncated by a killed node, another format, another configuration's)
is never trusted: loading warns, names the file, moves it aside to ``checkpoint.pt.corrupt`` and the
run starts afresh. Sweep folders often live where other users' jobs can write, so a checkpoint is read with
``weights_only=True``: tensors and plain Python types only. A pickle that would build any other object (and
so could run code) is refused like a truncated file, before anything in it runs.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import torch

from ..plumbing import atomic

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "checkpoint.pt"
FORMAT = 2


def save(path: Path, state: dict[str, Any], fingerprint: str) -> None:
    payload = {"format": FORMAT, "fingerprint": fingerprint, "state": state}

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:  # closed here, even on a full disk: its space comes back with the unlink
            torch.save(payload, handle)

    atomic.write_with(path, write)


def load(path: Path, fingerprint: str, device: torch.device) -> dict[str, Any] | None:
    """The saved state, or ``None`` when there is none or it must not be used (with a warning)."""
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as error:  # what weights_only raises for a global outside its allow-list
        if "weights only" in str(error).lower():
            return discard(path, "refused: it holds objects other than tensors and plain values, and loading "
                                 "them could run code (a file this version never writes)")
        return discard(path, f"unreadable (UnpicklingError: {str(error)[:100]})")
    except Exception as error:  # noqa: BLE001 - any unreadable file: truncated zip, another format, …
        return discard(path, f"unreadable ({type(error).__name__}: {str(error)[:100]})")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or "state" not in payload:
        return discard(path, "not a checkpoint of this modula-sweep version")
    if payload.get("fingerprint") != fingerprint:
        log.warning("%s belongs to another configuration of this folder; starting afresh", path)
        return None
    return payload["state"]


def discard(path: Path, reason: str) -> None:
    """Move an unusable checkpoint aside (kept for inspection) so the run starts afresh."""
    aside = path.with_name(path.name + ".corrupt")
    try:
        path.replace(aside)
    except FileNotFoundError:  # another process (a DDP rank) moved it first
        pass
    log.warning("%s is %s; moved to %s and starting this run afresh", path, reason, aside.name)
    return None
