"""The package's shape: short functions and no import circle in the module algebra."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "modula_cli"
MAX_FUNCTION_LINES = 60


def test_no_function_longer_than_60_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def _imports(path: Path) -> set[str]:
    """Sibling modules of ``modula_cli/nn`` that a module imports, at any depth (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_nn_has_no_import_circle():
    modules = {p.stem: _imports(p) for p in (PACKAGE / "nn").glob("*.py") if p.stem != "__init__"}

    def reaches(start, target, seen=()):
        return any(n == target or (n not in seen and reaches(n, target, (*seen, n)))
                   for n in modules.get(start, ()))

    circles = [name for name in modules if reaches(name, name)]
    assert not circles, circles
