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
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from filelock import FileLock

from ..plumbing import atomic, environment
from ..plumbing.errors import cause_text

REPO_DATA = Path(__file__).resolve().parents[2] / "data"
META_FILE = "meta.json"  # a prepared folder's record, written last: its settings and every file's size and hash
TOKEN_FILES = {"train": "train.bin", "val": "val.bin"}  # a prepared text's token ids per split (uint16 or uint32)
VOCAB_FILE = "vocab.json"  # a character tokenizer's symbols, in id order
FULL_CHECKSUM_LIMIT = 512 * 2**20  # bigger files are checked by size only on load (a full hash takes minutes)
# Offline, a connection attempt ends within this many seconds (a silent firewall would otherwise hold it for
# minutes); it also bounds each read of a download.
NETWORK_TIMEOUT_S = 10.0


class DataUnavailable(Exception):
    """Data that is not here and cannot be fetched or loaded. Its message is one line: what is missing,
    where it was looked for, and how to make it available."""


def unavailable(dataset: str, missing: str, cause: BaseException | str, fix: str | None = None) -> DataUnavailable:
    """``data=<dataset>: <missing> (<cause>); <fix>``; the default fix names the three ways to get the data."""
    reason = cause if isinstance(cause, str) else cause_text(cause)
    fix = fix or (f"put it there, point data.root or $MODULA_DATA at a folder that has it, or run "
                  f"`modula-prepare-data {dataset}` on a machine with internet access and copy its "
                  f"data.root here")
    return DataUnavailable(f"data={dataset}: {missing} ({reason}); {fix}")


def reachable(url: str, timeout: float = NETWORK_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``url``'s host (or to the proxy the environment names for it) opens within
    ``timeout``: a cheap look before a library that, offline, retries for half a minute."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def data_root(root: str | os.PathLike | None = None) -> Path:
    """``root`` if given, else ``$MODULA_DATA``, else the repository's ``data/``; ``~`` expanded (a shell leaves it
    as typed when quoted, and a ``.env`` file or a scheduler's environment never expands it)."""
    return Path(root or os.environ.get(environment.DATA) or REPO_DATA).expanduser()


def sha256_file(path: Path, chunk: int = 2**22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def prepared_sizes(folder: Path) -> dict[str, int] | None:
    """Tokens per split of a prepared token folder (its meta.json's count), else None."""
    try:
        tokens = json.loads((folder / META_FILE).read_text())["tokens"]
        return {"train": int(tokens["train"]), "validation": int(tokens["val"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _valid(folder: Path, expected: dict) -> dict | None:
    meta_path = folder / META_FILE
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


def _lock_path(target: Path) -> str:
    """The lock file of a cache folder or download, hidden beside it: it stays after use (removing a lock file
    another process may be waiting on would let two processes hold it), so it should not look like data."""
    return str(target.with_name(f".{target.name}.lock"))


def prepare_once(folder: Path, expected: dict, build: Callable[[Path], dict]) -> dict:
    """Return the metadata of a valid cache in ``folder``, building it first when needed.

    ``build(tmp_folder)`` writes the files into a temporary folder and returns extra metadata; the
    folder is swapped in and ``meta.json`` (with sizes and sha256 of every file) is written last.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    meta = _valid(folder, expected)
    if meta is not None:
        return meta
    with FileLock(_lock_path(folder)):
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
        atomic.write_text(folder / META_FILE, json.dumps(meta, indent=2))
        return meta


def fetch(url: str, destination: Path, dataset: str, missing: str | None = None) -> Path:
    """Download ``url`` to ``destination`` unless present; ``DataUnavailable`` when it cannot be had.
    ``missing`` says what is missing, when more than ``destination`` (e.g. an archive's extracted folder)."""
    if destination.is_file():
        return destination
    tmp = destination.with_name(destination.name + ".part")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(_lock_path(destination)):
            if not destination.is_file():  # another job may have fetched it while we waited
                with urllib.request.urlopen(url, timeout=NETWORK_TIMEOUT_S) as response, open(tmp, "wb") as out:
                    shutil.copyfileobj(response, out)
                tmp.rename(destination)
    except OSError as error:  # no network, a timeout, a read-only data root
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        what = missing or f"{destination} is missing"
        raise unavailable(dataset, f"{what} and could not be downloaded from {url}",
                          cause_text(error, innermost=True)) from error
    return destination
