"""Which file defines a user's builder, and a hash of it: an edited model is another network (its runs get
another fingerprint). Torch-free: the command line's checks and the run identities read it."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys


def importable_from_here() -> None:
    """Console scripts do not put the working folder on ``sys.path``; a user's builder lives there."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def source_digest(path: str) -> str | None:
    """A short hash of the file that defines ``package.module:function`` and of every module of the user's own
    folder that it imports, directly or through another (nanoGPT's builder beside its ``model.py``: an edited
    ``model.py`` is another network too), found without importing any of them; None when the builder's file
    cannot be found (the import's own error says so when the network is built). A builder that imports nothing
    of its folder hashes as its file alone."""
    importable_from_here()
    try:
        spec = importlib.util.find_spec(path.partition(":")[0])
        origin = spec.origin if spec is not None else None
        if not origin or not os.path.isfile(origin):
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
    importable_from_here()
    try:
        spec = importlib.util.find_spec(path.partition(":")[0])
        origin = spec.origin if spec is not None else None
        if not origin or not os.path.isfile(origin):
            return False
        for file in _own_modules(origin):
            with open(file, "rb") as source:
                tree = ast.parse(source.read())
            if any(name == "modula_cli" or name.startswith("modula_cli.")
                   for _, name in _imported_names(tree, "", "")):
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
        with open(current, "rb") as source:
            tree = ast.parse(source.read())
        for base, name in _imported_names(tree, folder, os.path.dirname(current)):
            candidate = _local_file(base, name)
            if candidate is not None and candidate.startswith(folder + os.sep) and candidate not in found:
                found.append(candidate)
                todo.append(candidate)
    return found


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
