"""The package's commands run as real processes that skip the imports every one of them repeats.

A command of this package spends about 2.5 s of CPU importing torch, Hydra, pandas and the package before it
does anything; the suite runs a few hundred. Here each one is a fresh process forked from a server that made
those imports once (``multiprocessing``'s forkserver with a preload, the standard library's pattern for it;
the server only imports, so the fork is safe). Everything a test looks at is the real process's: its own pid,
the signals sent to it, its exit status (128 + signal, ``sys.exit``'s code, a traceback's 1), its stdout and
stderr, its working directory, its environment and its ``sys.argv`` and ``sys.path`` as the interpreter would
set them for ``python -m module``, ``python -c code``, ``python script.py`` or a console script. What cannot be
run that way runs as a plain subprocess: another program (torchrun, bash), a stdin, a process group or umask of
its own, and any test of what a fresh interpreter imports or reads from its environment at import time (those
call ``subprocess`` themselves).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import tomllib
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# What every command imports before it does anything. Importing runs no torch computation and starts no thread pool
# of torch's, so the server stays safe to fork; the report picks matplotlib's Agg backend itself. (Modules importable
# without tests/ on the path: the server starts with the interpreter's own.)
PRELOAD = ["numpy", "pandas", "torch", "hydra", "omegaconf", "matplotlib.pyplot", "modula_cli.cli", "modula_cli.train",
           "modula_cli.sweep.callback", "modula_cli.analysis.report"]
_context: multiprocessing.context.ForkServerContext | None = None


def _entry_points() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def _plain_path() -> list[str]:
    """``sys.path`` past its first entry as a fresh interpreter has it without PYTHONPATH (no tests/ folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = "import sys, json; print(json.dumps(sys.path[1:]))"
    return json.loads(subprocess.check_output([sys.executable, "-c", probe], env=env, text=True))


_PLAIN_PATH: list[str] | None = None


def _server() -> multiprocessing.context.ForkServerContext:
    global _context, _PLAIN_PATH
    if _context is None:
        _PLAIN_PATH = _plain_path()
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def how(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """(kind, target, args) of a command the server runs: ``module``, ``code``, ``script`` or ``entry`` (a console
    script of this package); None for anything else."""
    program = str(argv[0])
    if program == sys.executable and len(argv) >= 3 and argv[1] in ("-m", "-c"):
        return ("module" if argv[1] == "-m" else "code"), argv[2], list(argv[3:])
    if program == sys.executable and len(argv) >= 2 and str(argv[1]).endswith(".py"):
        return "script", str(argv[1]), list(argv[2:])
    if Path(program).parent == BIN and Path(program).name in _entry_points():
        return "entry", _entry_points()[Path(program).name], list(argv[1:])
    return None


def _child(kind: str, target: str, args: list[str], program: str, cwd: str, env: dict[str, str], out: str,
           err: str | None, plain_path: list[str], umask: int | None) -> None:
    """In the forked process: become the command, run it, and leave as the interpreter would."""
    if umask is not None:
        os.umask(umask)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if err else 1, 2)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = {"module": cwd, "code": "", "script": str(Path(target).resolve().parent),
             "entry": str(Path(program).parent)}[kind]
    sys.path[:] = [first, *extra, *plain_path]
    import importlib

    importlib.invalidate_caches()
    code = 0
    try:
        if kind == "module":
            sys.argv = [target, *args]  # runpy sets argv[0] to the module's file
            sys.modules.pop(target, None)  # as ``python -m``: the module runs as __main__ only, not imported too
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "code":
            sys.argv = ["-c", *args]
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif kind == "script":
            sys.argv = [target, *args]
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = [program, *args]
            module, _, function = target.partition(":")
            code = importlib.import_module(module).__dict__[function]() or 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - as the interpreter: the traceback, then exit status 1
        traceback.print_exc()
        code = 1
    try:  # the interpreter's own way out: wait for its threads (loky's executor stops its workers then), atexit
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


class Started:
    """A command started on the server: what ``subprocess.Popen`` gives of it (pid, poll, wait, signals,
    communicate), its output read back once it has ended."""

    def __init__(self, argv: list[str], cwd: str | Path, env: dict[str, str] | None, merge_stderr: bool,
                 umask: int | None = None):
        kind, target, args = how(argv)  # the caller checked
        self.folder = tempfile.mkdtemp(prefix="prewarmed-")
        self.out = os.path.join(self.folder, "stdout")
        self.err = None if merge_stderr else os.path.join(self.folder, "stderr")
        context = _server()
        self.process = context.Process(
            target=_child, args=(kind, target, args, str(argv[0]), str(cwd), dict(os.environ if env is None else env),
                                 self.out, self.err, _PLAIN_PATH, umask))
        self.process.start()
        self.pid = self.process.pid
        self.args = list(argv)

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        if self.process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = (_read(self.out), _read(self.err) if self.err else None)
        shutil.rmtree(self.folder, ignore_errors=True)
        return out, err


def _read(path: str) -> str:
    """What a command wrote to one of its streams ("" where it ended before it could open it)."""
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def start(argv: list[str], cwd: str | Path, env: dict[str, str] | None = None, merge_stderr: bool = False,
          umask: int | None = None) -> Started | subprocess.Popen:
    """``subprocess.Popen(argv, cwd=cwd, env=env, stdout=PIPE, stderr=PIPE or STDOUT, text=True)``, on the
    server when it can run the command; ``umask``: the process's own (``preexec_fn=lambda: os.umask(umask)``)."""
    if how(argv) is not None:
        return Started(argv, cwd, env, merge_stderr, umask)
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True,
                            preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def run(argv: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None, capture_output: bool = True, text: bool = True,
        check: bool = False, umask: int | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=check)``, on
    the server when it can run the command. A command past its timeout is killed and TimeoutExpired raised, as
    there."""
    assert capture_output and text, "the output is captured, as text"
    started = start(argv, cwd if cwd is not None else os.getcwd(), env, umask=umask)
    try:
        out, err = started.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        started.kill()
        started.communicate()
        raise
    result = subprocess.CompletedProcess(argv, started.returncode, out, err)
    if check:
        result.check_returncode()
    return result
