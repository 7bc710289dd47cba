"""Atomic file writes: a reader (or a process killed mid-write) sees the old file or the new one, never
half of one. Each write goes to a temporary file unique to this process and thread, is flushed to disk
(fsync), then renamed over the target; two writers of one path never share a temporary file."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


_HOST = socket.gethostname().split(".")[0]


def _temporary_name(path: Path) -> Path:
    # The suffix stays last, so writers that infer the format from it (savefig) still can. The host name: on a
    # cluster's shared file system two nodes may run processes with the same pid.
    return path.with_name(f".{path.stem}.{_HOST}-{os.getpid()}-{threading.get_ident()}.tmp{path.suffix}")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some file systems do not open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class DiskFull(OSError):
    """The disk (or quota) holding a file is full: said in one line naming the disk and what is kept."""


FULL = (errno.ENOSPC, errno.EDQUOT)


def full_disk_cause(error: BaseException) -> OSError | None:
    """The ENOSPC / EDQUOT behind ``error``, if one is (torch.save reports it as its writer's RuntimeError, the
    OSError as its context)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL:
            return error
        error = error.__cause__ or error.__context__
    return None


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (the deepest folder above it on the same device)."""
    path = path.absolute()
    while not path.exists():
        path = path.parent
    device = path.stat().st_dev
    while path.parent != path and path.parent.stat().st_dev == device:
        path = path.parent
    return path


def disk_full(error: OSError, path: Path, kept: str) -> DiskFull:
    """``error`` (ENOSPC or EDQUOT while writing ``path``) as one line: the disk, its free space, what is kept."""
    try:
        place = mount_point(path.parent)
        left = shutil.disk_usage(place).free
        free = f"{left / 2**20:.1f} MB free" if left >= 2**20 else f"{left / 1024:.0f} KB free"
    except OSError:
        place, free = path.parent, "free space unknown"
    what = "the disk quota is used up" if error.errno == errno.EDQUOT else "no space left on the disk"
    full = DiskFull(f"{what} at {place} ({free}) while writing {path}; {kept}; free space and run the same command "
                    f"to resume")
    full.errno = error.errno
    return full


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically, on error it is removed (a full
    disk: ``DiskFull``, the file there before kept whole)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(path)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except Exception as error:
        full = full_disk_cause(error)
        if full is not None and not isinstance(error, DiskFull):
            tmp.unlink(missing_ok=True)  # its space back first: what comes next (the run's summary) needs a little
            kept = f"the last {path.name} is kept as it was" if path.exists() else f"no {path.name} was written"
            raise disk_full(full, path, kept) from error
        raise
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_with(path: str | os.PathLike, writer: Callable[[Path], object]) -> None:
    """``writer(tmp)`` writes the file (``torch.save``, ``fig.savefig``, ``frame.to_csv``); then it is swapped in."""
    with atomic_path(path) as tmp:
        writer(tmp)


def folder_problem(folder: str | Path) -> str | None:
    """Why ``folder`` (a folder a command will create or write into; it may end in an unresolved ``${…}``) cannot
    be written, in one line; None when it can. Only the part before the first interpolation is looked at."""
    text = str(folder)
    fixed = text.split("${", 1)[0]
    path = Path(fixed if fixed == text or fixed.endswith(("/", os.sep)) else os.path.dirname(fixed) or ".")
    path = path.expanduser().absolute()
    for place in (path, *path.parents):
        if place.is_dir():
            if not os.access(place, os.W_OK | os.X_OK):
                return f"{place} is not writable"
            return _refuses_folders(place)
        if place.exists():
            return f"{place} is a file, not a folder"
    return None


def _refuses_folders(place: Path) -> str | None:
    """Whether a folder can really be made in ``place``: permission bits do not say it of a system folder such as
    /proc, where even root cannot (a folder made and removed at once)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=place))
    except OSError as error:
        return f"no folder can be made in {place} (the system says: {error.strerror or error})"
    return None


def remove_if_empty(folder: Path, up_to: Path | None = None) -> None:
    """Remove ``folder`` when nothing is in it (a folder made for a command that wrote nothing), then each
    parent below ``up_to`` that this leaves empty; a folder holding anything, an earlier run's files included,
    stays."""
    folder = Path(folder).absolute()
    stop = Path(up_to).absolute() if up_to is not None else folder.parent
    if stop not in folder.parents:  # not below up_to: the folder alone
        stop = folder.parent
    while folder != stop:
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass  # already gone (its run's locks took it): its parents may still be empty
        except OSError:
            return
        folder = folder.parent
