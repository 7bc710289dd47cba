"""The architectures a config can name (``arch.name``) and the paper / modular variants of their maths."""

from .builders import (ARCHITECTURES, DATA_KINDS, Architecture, ModelError, build_model, builtin_roles,
                       data_kind_problem, import_builder, is_import_path, role_problems)

__all__ = ["ARCHITECTURES", "DATA_KINDS", "Architecture", "ModelError", "build_model", "builtin_roles",
           "data_kind_problem", "import_builder", "is_import_path", "role_problems"]
