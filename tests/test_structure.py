"""The package's shape: short functions and no import circle in the module algebra; CI's path."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "modula_cli"
MAX_FUNCTION_LINES = 60


def _long_functions(folder: Path) -> list[str]:
    long = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return long


@pytest.mark.parametrize("folder", ["modula_cli", "hydra_plugins", "scripts"])
def test_no_function_longer_than_60_lines(folder):
    assert _long_functions(ROOT / folder) == []


def _module_state(path: Path, objects_only: bool = False) -> list[str]:
    """Names a module binds at its top level to a value that can change: a list, dict or set (literal or
    comprehension), or an object made by calling a class (``ExitStack()``; ``objects_only``: those alone);
    constants, tuples, frozen values and functions are not state."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            and node.value is not None else []
        value = getattr(node, "value", None)
        made = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id[:1].isupper() \
            and value.func.id not in IMMUTABLE_CALLS
        mutable = made or not objects_only and isinstance(
            value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp))
        found += [f"{path.name}:{node.lineno} {ast.unparse(t)}" for t in targets if mutable]
    return found


# calls that make a value nobody changes: typing helpers, frozen records, compiled patterns
IMMUTABLE_CALLS = {"TypeVar", "Path", "NamedTuple", "MappingProxyType"}


def test_no_module_level_state_in_the_launching_code():
    """A launch is an object (``sweep/launch.Launch``): nothing of one lives in a module of ``sweep/`` or of the
    Hydra plugins, where a second launch in one process (or a test) would inherit it."""
    sources = [*(PACKAGE / "sweep").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
    assert [found for path in sources for found in _module_state(path)] == []


MUTATING_METHODS = {"append", "extend", "update", "setdefault", "pop", "popitem", "clear", "add", "discard", "remove",
                    "insert"}


def _written_by_functions(path: Path) -> list[str]:
    """Module-level names that a function of the module writes into (``NAME[k] = v``, ``NAME.update(…)``): state
    that outlives the call, or a registry that grows."""
    tree = ast.parse(path.read_text())
    tops = {t.id for node in tree.body for t in (node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.AnnAssign) else []) if isinstance(t, ast.Name)}
    found = set()
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
                [node.target] if isinstance(node, ast.AugAssign) else []
            for target in [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in tops:
                    found.add(target.value.id)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in MUTATING_METHODS and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in tops:
                found.add(node.func.value.id)
    return sorted(found)


def _module_objects(path: Path) -> list[str]:
    """Module-level objects made by calling a class (``STOP = StopSignal()``)."""
    return [found.split(" ", 1)[1] for found in _module_state(path, objects_only=True)]


# The two kinds of module-level state the package keeps, each on purpose: the mode-settings registry, which grows
# as each block is declared (at import: ``settings_block``), and the stop flag, which mirrors the process's signal
# disposition (the operating system's, one per process: ``plumbing/signals.py``).
REGISTRIES = {"modula_cli/optim/mode_settings.py BLOCKS", "modula_cli/optim/mode_settings.py BLOCK_DOCS",
              "modula_cli/optim/mode_settings.py FLAT_NAMES", "modula_cli/optim/mode_settings.py BLOCK_PATHS"}
PROCESS_STATE = {"modula_cli/plumbing/signals.py STOP"}


def test_no_module_of_the_package_keeps_state_between_calls():
    """Nothing a call learns lives on in a module (a cache, a count, a choice): it lives in the object that
    holds the run, the launch or the job (e.g. a sweep's thread count: ``sweep/job_place.PlacedTask``)."""
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
    written = {f"{path.relative_to(ROOT)} {name}" for path in sources for name in _written_by_functions(path)}
    objects = {f"{path.relative_to(ROOT)} {name}" for path in sources for name in _module_objects(path)}
    assert sorted(written - REGISTRIES) == [] and sorted(objects - PROCESS_STATE) == []
    assert written == REGISTRIES and objects == PROCESS_STATE  # the exceptions above are real ones


def _cached_functions(path: Path) -> list[str]:
    """Module-level functions that remember their results (``functools.cache``, ``lru_cache``)."""
    def remembers(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return ast.unparse(target).split(".")[-1] in ("cache", "lru_cache")
    return [node.name for node in ast.parse(path.read_text()).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(remembers, node.decorator_list))]


# Functions that remember, each on purpose: pure ones, whose answer their arguments fix (a file's content by its
# size and time, the built-in networks' roles), and one note said once per process (every run of a sweep in it
# would say the same line).
REMEMBERING = {"modula_cli/models/builders.py builtin_roles", "modula_cli/plumbing/user_code.py _parsed_imports",
               "modula_cli/data/tokens.py _largest_id", "modula_cli/data/identity.py _file_digest",
               "modula_cli/data/shakespeare.py _sizes", "modula_cli/run/context.py say_once"}


def test_no_function_remembers_but_the_named_ones():
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
    assert {f"{path.relative_to(ROOT)} {name}" for path in sources for name in _cached_functions(path)} == REMEMBERING


def test_the_state_check_sees_a_cache_a_function_fills(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("A = {}\nB = []\nC = {}\nD = {}\nE = [1]\nF = Flag()\nG = (1,)\n"
                     "def f(k):\n    A[k] = 1\n    B.append(k)\n    C[k], D[k] = 1, 2\n    return E[0]\n")
    assert _written_by_functions(probe) == ["A", "B", "C", "D"]
    assert _module_objects(probe) == ["F"]
    probe.write_text("import functools\n@functools.cache\ndef a(): pass\n@functools.lru_cache(maxsize=2)\n"
                     "def b(): pass\n@cache\ndef c(): pass\n@property\ndef d(): pass\n")
    assert _cached_functions(probe) == ["a", "b", "c"]


def test_the_module_state_check_sees_lists_dicts_and_objects(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("A = []\nB: dict = {}\nC = ExitStack()\nD = (1, 2)\nE = frozenset()\nF = Path('x')\n"
                     "G = {k: 1 for k in 'ab'}\nlog = logging.getLogger(__name__)\n")
    assert [line.split(" ", 1)[1] for line in _module_state(probe)] == ["A", "B", "C", "G"]


def test_no_function_rebinds_a_module_global():
    """State lives in objects: no ``global`` statement in the package or its plugins (the last one kept W&B's
    reachability for a process; the sweep folder's marker says it to every process)."""
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
    found = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in sources
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Global)]
    assert found == []


def test_every_environment_variable_is_named_in_one_module():
    """Our own variables (``MODULA_*``) are spelled as names in ``plumbing/environment.py`` alone (text may
    mention them): renaming one there cannot leave a reader elsewhere listening for the old name."""
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
    spelled = [str(path.relative_to(ROOT)) for path in sources
               if any(isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and re.fullmatch(r"MODULA_[A-Z_]+", node.value)
                      for node in ast.walk(ast.parse(path.read_text())))]
    assert spelled == ["modula_cli/plumbing/environment.py"]


def test_the_trainer_reads_typed_settings():
    """The Hydra config reaches ``run/`` only at its entry point (``trainer.train``), which builds the typed
    ``RunConfig`` once; the rooms below read fields, not ``cfg.group.key`` strings."""
    group = re.compile(r"\bcfg\.(train|arch|optim|data|sweep|logger|variant|get)\b|\bDictConfig\b")
    reading_the_hydra_config = [f"{path.name}:{number}" for path in (PACKAGE / "run").glob("*.py")
                                if path.name != "trainer.py"
                                for number, line in enumerate(path.read_text().splitlines(), 1) if group.search(line)]
    assert reading_the_hydra_config == []


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
LAYERS = {"plumbing": 0, "nn": 1, "schedulers": 1, "data": 2, "models": 3, "optim": 4, "config": 5, "results": 6,
          "run": 7, "analysis": 7, "sweep": 8, "coord": 8, "command_line": 6, "cli": 7, "swept_optimizer": 6,
          "train": 9}


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
    # the first pass finds no text: $MODULA_DATA at a new empty folder, nothing required; the second pass requires
    # the tests that read it, between the first pass and the engines
    first = lines[:order[1]]
    assert 'no_text="$(mktemp -d)"' in first and first[-2:] == ['export MODULA_DATA="$no_text"',
                                                                 "unset MODULA_DATA_TESTS"], first
    second = next(i for i, line in enumerate(lines) if "MODULA_DATA_TESTS=required" in line and "-m real_text" in line)
    assert order[1] < second < order[2], lines
