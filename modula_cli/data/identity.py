"""What a user's data is, as a short hash: a changed corpus is another run (its runs get another fingerprint and
never share a transfer curve with the old ones), and its tokenised cache another folder.

A file is hashed by its content: whole up to ``FULL_HASH_LIMIT``, beyond it by its size and ``SAMPLED_BLOCKS``
blocks spread over it (a 10 GB corpus would take a minute to hash, and every job of a sweep asks). A folder is
hashed by each file's relative path and hash; a folder of many files (images) by their paths, sizes and times.
Hashes are remembered per process for a file whose size and modification time have not changed.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

FULL_HASH_LIMIT = 256 * 2**20
SAMPLED_BLOCKS, BLOCK_BYTES = 64, 2**20
DIGEST_LENGTH = 16


def file_digest(path: str | os.PathLike) -> str:
    """The content hash of one file (sampled past ``FULL_HASH_LIMIT``)."""
    stat = os.stat(path)
    return _file_digest(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as handle:
        if size <= FULL_HASH_LIMIT:
            while block := handle.read(BLOCK_BYTES):
                digest.update(block)
        else:
            for index in range(SAMPLED_BLOCKS):
                handle.seek((size - BLOCK_BYTES) * index // (SAMPLED_BLOCKS - 1))
                digest.update(handle.read(BLOCK_BYTES))
    return digest.hexdigest()[:DIGEST_LENGTH]


def path_digest(path: str | os.PathLike) -> str | None:
    """The hash of a file, or of a folder's files (hidden ones and lock files left out); None when ``path`` does
    not exist (its dataset's own check says so)."""
    path = Path(path).expanduser()
    if path.is_file():
        return file_digest(path)
    if not path.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = file.relative_to(path)
        if any(part.startswith(".") for part in relative.parts):
            continue
        digest.update(f"{relative.as_posix()}={file_digest(file)};".encode())
    return digest.hexdigest()[:DIGEST_LENGTH]


def combined(*parts: str | None) -> str | None:
    """One hash of several (None parts left out); None when every part is None."""
    known = [p for p in parts if p is not None]
    return hashlib.sha256("|".join(known).encode()).hexdigest()[:DIGEST_LENGTH] if known else None


def listing_digest(folder: str | os.PathLike) -> str | None:
    """A cheaper hash of a folder of many files (an image folder): each file's relative path, size and modification
    time, none of them read. None when the folder does not exist."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = file.stat()
        digest.update(f"{file.relative_to(folder).as_posix()}={stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:DIGEST_LENGTH]
