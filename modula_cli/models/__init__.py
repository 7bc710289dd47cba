"""The architectures a config can name (``arch.name``) and the paper / modular variants of their maths. Names
load on first use (``plumbing/lazy.py``): the command line's checks read ``models.config`` without torch."""

from ..plumbing.lazy import exports_of, lazy_exports

_EXPORTS = exports_of({".builders": (
    "ARCHITECTURES", "DATA_KINDS", "Architecture", "ModelError", "build_model", "builtin_roles", "data_kind_problem",
    "import_builder", "is_import_path", "role_problems")})
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
