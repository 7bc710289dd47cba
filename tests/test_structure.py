"""The package's shape: short functions and no import circle in the module algebra; CI's path."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "modula_cli"
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


# The package's layers, from the bottom (docs/design.md, "Package map"): a package imports only from lower
# layers (or within itself), so reading the code bottom-up never meets a name defined further up.
LAYERS = {"plumbing": 1, "nn": 1, "data": 2, "models": 3, "optim": 4, "config": 5, "results": 6, "run": 7,
          "analysis": 7, "sweep": 8, "coord": 8, "cli": 6, "train": 9}


def _package_imports(path: Path) -> set[str]:
    """The modula_cli modules that a module imports (relative or absolute, lazy ones too), as dotted names."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    here = parts[:-1]  # the importing module's package, relative to modula_cli
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[:len(here) - node.level + 1]
            found.add(".".join([*base, *([node.module] if node.module else [])]) or node.names[0].name)
            if not node.module:
                found.update(".".join([*base, alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("modula_cli."):
            found.add(node.module.removeprefix("modula_cli."))
    return {name for name in found if name}


def test_no_package_imports_a_layer_above_it():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer == "__init__":
            continue
        for target in _package_imports(path):
            top = target.split(".")[0]
            if top in LAYERS and top != layer and LAYERS[top] >= LAYERS[layer]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {target} ({top} is not below {layer})")
    assert not upward, upward
    assert set(LAYERS) == {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
                           if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and
                                                                                 p.stem != "__init__")}


def test_lazy_packages_resolve_every_public_name():
    import importlib

    for package in ("modula_cli.data", "modula_cli.models", "modula_cli.optim"):
        module = importlib.import_module(package)
        assert module.__all__ and dir(module) == sorted(module.__all__)
        for name in module.__all__:
            value = getattr(module, name)
            assert not isinstance(value, type(module)), f"{package}.{name} is a module, not the exported name"
        with pytest.raises(AttributeError, match=f"^module '{package}' has no attribute 'not_a_name'$"):
            _ = module.not_a_name


def _commands_under(readme: str, heading: str) -> list[str]:
    """The commands of the first ```bash block after ``heading``."""
    section = readme.split(heading, 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_ci_walks_the_newcomers_path_first():
    """.ci/run: README's setup command, then README's test command with no cluster engine started yet, and only
    after them the engines and the cluster tests, required."""
    readme = (ROOT / "README.md").read_text()
    setup, test = _commands_under(readme, "## Setup"), _commands_under(readme, "## Test")
    assert len(setup) == 1 and len(test) == 1, (setup, test)
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.strip().startswith("#")]
    order = [lines.index(setup[0]), lines.index(test[0]),
             next(i for i, line in enumerate(lines) if "scripts/cluster/up.sh" in line),
             next(i for i, line in enumerate(lines) if line.startswith("MODULA_CLUSTER_TESTS=required pytest")
                  and "tests/test_clusters.py" in line)]
    assert order == sorted(order), lines
    assert not any("MODULA_CLUSTER_TESTS" in line for line in lines[:order[1] + 1])  # the first pass may skip them
