"""Where datasets live and how a prepared cache is built once, safely, by parallel jobs.

Layout: ``<root>/<dataset>/`` holds raw downloads; each prepared variant lives in its own folder
``<root>/<dataset>/<variant>/`` with ``meta.json`` written last. A folder without a valid ``meta.json``
(killed preparation), with files whose size or checksum disagree (corruption), or built from another
source or tokenizer, is rebuilt, never reused. Preparation holds a file lock, so the jobs of a sweep wait
for the first one instead of racing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from .. import atomic

REPO_DATA = Path(__file__).resolve().parents[2] / "data"
FULL_CHECKSUM_LIMIT = 512 * 2**20  # bigger files are checked by size only on load (a full hash takes minutes)


def data_root(root: str | os.PathLike | None = None) -> Path:
    """``root`` if given, else ``$MODULA_DATA``, else the repository's ``data/``."""
    if root:
        return Path(root).expanduser()
    return Path(os.environ.get("MODULA_DATA") or REPO_DATA)


def sha256_file(path: Path, chunk: int = 2**22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _valid(folder: Path, expected: dict) -> dict | None:
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError:
        return None
    if any(meta.get(key) != value for key, value in expected.items()):
        return None
    for name, info in meta.get("files", {}).items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != info["bytes"]:
            return None
        if info["bytes"] <= FULL_CHECKSUM_LIMIT and sha256_file(path) != info["sha256"]:
            return None
    return meta


def prepare_once(folder: Path, expected: dict, build: Callable[[Path], dict]) -> dict:
    """Return the metadata of a valid cache in ``folder``, building it first when needed.

    ``build(tmp_folder)`` writes the files into a temporary folder and returns extra metadata; the
    folder is swapped in and ``meta.json`` (with sizes and sha256 of every file) is written last.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    meta = _valid(folder, expected)
    if meta is not None:
        return meta
    with FileLock(str(folder) + ".lock"):
        meta = _valid(folder, expected)  # another job may have finished while we waited
        if meta is not None:
            return meta
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            extra = build(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # no half-built folder left behind
            raise
        files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(tmp.iterdir())}
        meta = {**expected, **extra, "files": files}
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        atomic.write_text(folder / "meta.json", json.dumps(meta, indent=2))
        return meta


def fetch(url: str, destination: Path, prepare_hint: str) -> Path:
    """Download ``url`` to ``destination`` unless present; on failure say where to put the file."""
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(destination) + ".lock"):
        if destination.is_file():
            return destination
        tmp = destination.with_name(destination.name + ".part")
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as error:
            tmp.unlink(missing_ok=True)
            raise FileNotFoundError(
                f"{destination} is missing and could not be downloaded from {url} ({error}). "
                f"Put the file there by hand (or point data.root / $MODULA_DATA at a folder that has it), "
                f"or run `{prepare_hint}` on a machine with internet access."
            ) from error
        tmp.rename(destination)
    return destination
