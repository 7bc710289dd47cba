"""Package namespaces that import their modules on first use (PEP 562), so that the command line's config
checks and ``--help`` compose the config without importing torch: it loads when training starts."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps each public name to the submodule
    (relative, ``".checks"``) that defines it, or ``".module:other_name"`` for a name it has there, imported
    when the name is first read."""
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = exports[name].partition(":")
        value = getattr(import_module(module, package), attribute or name)
        setattr(import_module(package), name, value)  # later reads skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__


def exports_of(modules: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """``{".checks": ("validate_optim",), …}`` → ``{"validate_optim": ".checks", …}``."""
    return {name: module for module, names in modules.items() for name in names}
