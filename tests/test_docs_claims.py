"""docs/design.md says only what the code does: every file, folder, function, class and attribute it names in
backticks exists; every file name of a run or sweep folder is one constant, spelled once; every environment
variable is named in ``plumbing/environment.py`` alone."""

import ast
import re
from collections import defaultdict
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
CODE = [ROOT / "modula_cli", ROOT / "hydra_plugins"]
DESIGN = ROOT / "docs" / "design.md"
# where a path that design.md writes relative to its context may start
PATH_BASES = [ROOT, ROOT / "modula_cli", ROOT / "hydra_plugins" / "modula_sweep", ROOT / "docs" / "results",
              ROOT / "examples"]
FILE_SUFFIXES = (".py", ".yaml", ".md")
EXTERNAL = ("torch.", "mup.", "hydra.", "@hydra")  # other projects' names: not ours to check


def _sources() -> list[Path]:
    return [path for folder in CODE for path in sorted(folder.rglob("*.py"))]


def _backticked(text: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"`([^`\n]+)`", text)))


def _defined_names() -> dict[str, set[str]]:
    """Every name the code defines (function, class, assignment, dataclass field, keyword argument, attribute set
    on ``self``) and every word-like string it holds (a status, a metric, a settings key), with the attributes of
    each class, its bases' included."""
    names: dict[str, set[str]] = defaultdict(set)
    bases: dict[str, list[str]] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                for item in ast.walk(node):
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names[node.name].add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names[node.name].add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        names[node.name].update(t.id for t in item.targets if isinstance(t, ast.Name))
                    elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) \
                            and item.value.id == "self":
                        names[node.name].add(item.attr)
                names[""].add(node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names[""].add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names[""].add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names[""].add(node.target.id)
            elif isinstance(node, ast.keyword) and node.arg:
                names[""].add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w.]+", node.value):
                names[""].add(node.value)
    for cls, parents in bases.items():  # inherited attributes (one level is all the docs need, but go up)
        seen, todo = set(), list(parents)
        while todo:
            parent = todo.pop()
            if parent not in seen:
                seen.add(parent)
                names[cls] |= names.get(parent, set())
                todo += bases.get(parent, [])
    return names


def _config_keys() -> set[str]:
    keys = set()
    for path in (ROOT / "configs").rglob("*.yaml"):
        keys.update(re.findall(r"^\s*([\w]+):", path.read_text(), flags=re.M))
    return keys


def _path_exists(token: str) -> bool:
    token = token.rstrip("/")
    if any((base / token).exists() for base in PATH_BASES):
        return True
    if "/" not in token:  # a bare file or folder name, written in the context of its package or folder
        return any(True for base in (ROOT / "modula_cli", ROOT / "docs", ROOT / "examples", ROOT / "hydra_plugins",
                                     ROOT / "scripts", ROOT / "tests", ROOT / "configs") for _ in base.rglob(token))
    return False


def _file_and_attribute(token: str) -> tuple[str, str] | None:
    """``optim/state.StepScalars`` → ("optim/state.py", "StepScalars"); None when the token is not of that form."""
    match = re.fullmatch(r"([\w/]+/\w+)\.(\w+)", token)
    return (match.group(1) + ".py", match.group(2)) if match else None


def _is_path(token: str) -> bool:
    return bool(re.fullmatch(r"[\w./-]+", token)) and (token.endswith(FILE_SUFFIXES) or token.endswith("/"))


def _is_code_name(token: str) -> bool:
    """A class (CamelCase), a function or attribute (snake_case with an underscore, or called: ``name()``), or a
    dotted ``Class.attribute``; not a formula, a setting (``optim.lr``) or a word."""
    bare = token.removesuffix("()")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?", bare) or token.startswith(EXTERNAL):
        return False
    head = bare.split(".")[0]
    return (head[0].isupper() and not head.isupper() and any(c.islower() for c in head)) \
        or ("." not in bare and ("_" in bare or token.endswith("()")))


def _missing_paths(text: str) -> list[str]:
    tokens = _backticked(text)
    missing = [t for t in tokens if _is_path(t) and "<" not in t and not _path_exists(t)]
    for token in tokens:
        if (pair := _file_and_attribute(token)) and not _is_path(token):
            module = ROOT / "modula_cli" / pair[0]
            if not module.exists():
                missing.append(token)
            elif pair[1] not in _names_in(module):
                missing.append(token)
    return missing


def _names_in(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}


def _missing_names(text: str) -> list[str]:
    names, keys = _defined_names(), _config_keys()
    missing = []
    for token in _backticked(text):
        if not _is_code_name(token) or _file_and_attribute(token):
            continue
        owner, _, attribute = token.removesuffix("()").rpartition(".")
        if owner and owner[0].isupper():  # Class.attribute
            if owner not in names[""] or attribute not in names.get(owner, set()):
                missing.append(token)
        elif attribute not in names[""] and attribute not in keys:
            missing.append(token)
    return missing


def test_every_file_and_folder_design_names_exists():
    assert _missing_paths(DESIGN.read_text()) == []


def test_every_function_class_and_attribute_design_names_is_defined():
    assert _missing_names(DESIGN.read_text()) == []


def test_the_design_checks_see_what_is_gone():
    """A file, a module's name, a function and a method that do not exist are found; formulas, settings, other
    projects' names and what does exist are not."""
    text = ("The loop (`run/nowhere.py`, `run/loop.py`, `_check_divergence_gone`, `_check_divergence`) and "
            "`Module.no_such_method()`, `Module.atom_list()`; `optim/state.NoSuchScalars`, `optim/state.StepScalars`; "
            "`M2 @ M1`, `optim.lr`, `torch.nn.Module.named_parameters()`, `UVᵀ` are not names.")
    assert _missing_paths(text) == ["run/nowhere.py", "optim/state.NoSuchScalars"]
    assert _missing_names(text) == ["_check_divergence_gone", "Module.no_such_method()"]


# --- one constant per file name, one home per environment variable -------------------------------------------

FILE_NAME = re.compile(r"\.?[\w-]+(\.[\w-]+)*\.(json|jsonl|yaml|csv|png|pt|lock|owner|txt|bin|pkl)")
ENVIRONMENT_NAME = re.compile(r"(MODULA|SLURM|CUDA|OMP|MKL|WANDB|HF|HYDRA|RAY|TORCH|NCCL|WORLD|LOCAL)_[A-Z0-9_]+")
ENVIRONMENT_HOME = ROOT / "modula_cli" / "plumbing" / "environment.py"


def _string_constants() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found[node.value].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_each_file_name_is_spelled_once():
    """``config.yaml`` spelled in two modules is two names that must be kept equal by hand: one constant each."""
    twice = {name: where for name, where in _string_constants().items()
             if FILE_NAME.fullmatch(name) and len(where) > 1}
    assert twice == {}


def test_the_run_and_sweep_folders_files_are_named_in_results_files():
    from modula_cli.results import files

    named = {value for key, value in vars(files).items() if key.isupper() and isinstance(value, str)}
    assert {"config.yaml", "metrics.jsonl", "summary.json", "sweep.json", "search.json", "multirun.yaml",
            "results.csv", "optimal_lr.csv", "transfer.csv", "law.csv", "curves.csv", "scale.csv", "transfer.png",
            "scale.png"} <= named
    assert files.REPORT_FILES[0] == files.RESULTS_FILE and len(set(files.REPORT_FILES)) == len(files.REPORT_FILES)


def test_each_environment_variable_is_named_in_environment_py_alone():
    """Every environment variable the package or its plugins read or set is a name of ``plumbing/environment.py``:
    no other module spells one, and no other module indexes ``os.environ`` with a string of its own."""
    home = str(ENVIRONMENT_HOME.relative_to(ROOT))
    elsewhere = {name: [w for w in where if not w.startswith(home)] for name, where in _string_constants().items()
                 if ENVIRONMENT_NAME.fullmatch(name)}
    assert {name: where for name, where in elsewhere.items() if where} == {}
    literal_keys = []
    for path in _sources():
        if path == ENVIRONMENT_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
                key = node.slice
            elif isinstance(node, ast.Call) and re.search(r"(environ\.(get|pop|setdefault)|getenv)$",
                                                          ast.unparse(node.func)) and node.args:
                key = node.args[0]
            if isinstance(key, ast.Constant):
                literal_keys.append(f"{path.relative_to(ROOT)}:{node.lineno} {key.value}")
    assert literal_keys == []
