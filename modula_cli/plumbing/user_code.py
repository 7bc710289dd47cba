"""A user's own code, named by an import path ``package.module:function`` (``arch.name``, ``data.name``): importing it
with a one-line error that says what to change, which files define it, and a hash of them (an edited model or
data function is another run: its runs get another fingerprint). Torch-free: the command line's checks and the
run identities read it."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

from .errors import cause_text


def is_import_path(name: str) -> bool:
    return ":" in name


def import_function(path: str, key: str, error: type[Exception] = ValueError) -> Callable[..., Any]:
    """``package.module:function`` → the function, importable from the working directory or PYTHONPATH; else
    ``error`` in one line naming the setting ``key`` (``arch.name``) and what to change."""
    module_name, _, function_name = path.partition(":")
    if not module_name or not function_name:
        raise error(f"{key}={path!r}: an import path needs both parts, e.g. my_module:my_function")
    importable_from_here()
    try:
        module = importlib.import_module(module_name)
    except Exception as failure:  # noqa: BLE001 - any failure while importing the user's file is reported as one line
        raise error(f"{key}={path!r}: cannot import {module_name} ({import_failure(module_name, failure)}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        found = "not callable" if function is not None else "not defined"
        raise error(f"{key}={path!r}: {function_name} is {found} in {module.__file__}")
    return function


def import_failure(module_name: str, error: Exception) -> str:
    """Why the user's module did not import, and what to change: where it is not found, the folder to run from;
    a module it imports that is missing, that one; a syntax error, its file and line; else what it raised."""
    if isinstance(error, SyntaxError):
        where = f"{error.filename}, line {error.lineno}" if error.filename else "its source"
        return f"SyntaxError: {error.msg} at {where}); fix that line"
    if isinstance(error, ModuleNotFoundError) and error.name is not None and \
            module_name.split(".")[:len(error.name.split("."))] == error.name.split("."):
        return (f"ModuleNotFoundError: {error}); run from the folder that holds it or add that folder to "
                f"PYTHONPATH")
    if isinstance(error, ModuleNotFoundError):
        return f"ModuleNotFoundError: {error}); it imports {error.name!r}: install it, or put it beside the file"
    return f"{cause_text(error)}, raised while importing it); fix the module"


def importable_from_here() -> None:
    """Console scripts do not put the working folder on ``sys.path``; a user's builder lives there."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def _builder_file(path: str) -> str | None:
    """The file that defines ``package.module:function``, found without importing it (None: not found)."""
    importable_from_here()
    spec = importlib.util.find_spec(path.partition(":")[0])
    origin = spec.origin if spec is not None else None
    return origin if origin and os.path.isfile(origin) else None


def source_digest(path: str) -> str | None:
    """A short hash of the file that defines ``package.module:function`` and of every module of the user's own
    folder that it imports, directly or through another (nanoGPT's builder beside its ``model.py``: an edited
    ``model.py`` is another network too), found without importing any of them; None when the builder's file
    cannot be found (the import's own error says so when the network is built). A builder that imports nothing
    of its folder hashes as its file alone."""
    try:
        origin = _builder_file(path)
        if origin is None:
            return None
        files = _own_modules(origin)
        digest = hashlib.sha256()
        for file in files:
            with open(file, "rb") as source:
                digest.update(source.read())
        return digest.hexdigest()[:12]
    except (ImportError, ValueError, OSError, SyntaxError):
        return None


def plain_torch_builder(path: str) -> bool:
    """Whether the builder ``package.module:function`` returns a plain torch model: neither its file nor any module
    of its folder that it imports imports ``modula_cli`` (a network of this library's atoms needs it). Read without
    importing anything; False when the file cannot be found (the import's own error says why)."""
    try:
        origin = _builder_file(path)
        if origin is None:
            return False
        for file in _own_modules(origin):
            if any(name == "modula_cli" or name.startswith("modula_cli.") for _, name in _imports_of(file, "")):
                return False
        return True
    except (ImportError, ValueError, OSError, SyntaxError):
        return False


def _own_modules(origin: str) -> list[str]:
    """``origin`` and the files of the modules it imports, transitively, that lie in its folder or below (the
    user's own code: not the standard library, torch or anything installed), in the order first reached."""
    folder = os.path.dirname(os.path.abspath(origin))
    found, todo = [os.path.abspath(origin)], [os.path.abspath(origin)]
    while todo:
        current = todo.pop()
        for base, name in _imports_of(current, folder):
            candidate = _local_file(base, name)
            if candidate is not None and candidate.startswith(folder + os.sep) and candidate not in found:
                found.append(candidate)
                todo.append(candidate)
    return found


def _imports_of(file: str, folder: str) -> tuple[tuple[str, str], ...]:
    """``_imported_names`` of ``file``, parsed once per content (a sweep's plan asks for every run: parsing each time
    cost a user model's sweep a third of its planning)."""
    with open(file, "rb") as source:
        return _parsed_imports(source.read(), folder, os.path.dirname(file))


@functools.lru_cache(maxsize=256)
def _parsed_imports(source: bytes, folder: str, here: str) -> tuple[tuple[str, str], ...]:
    return tuple(_imported_names(ast.parse(source), folder, here))


def _imported_names(tree: ast.AST, folder: str, here: str) -> list[tuple[str, str]]:
    """(the folder a name is looked up in, the dotted name) of every import: absolute ones from the builder's
    folder (where the working folder puts them on sys.path), relative ones from the importing file's package."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(folder, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append((folder, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            package = here
            for _ in range(node.level - 1):
                package = os.path.dirname(package)
            names += ([(package, node.module)] if node.module else
                      [(package, alias.name) for alias in node.names])
    return names


def _local_file(folder: str, module: str) -> str | None:
    """The file of ``module`` (``a.b``) under ``folder``, as a module or a package, if there is one."""
    base = os.path.join(folder, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None
