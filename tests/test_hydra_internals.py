"""Hydra's private API, pinned: modula_cli/config/hydra_internals.py is the only module that uses it, every use
works on the installed hydra-core, and our override application matches Hydra's own."""

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from packaging.specifiers import SpecifierSet

from modula_cli.config import CONFIG_DIR
from modula_cli.config.hydra_internals import SUPPORTED, args_parser, composer, split_sweep
from modula_cli.config.overrides import OverrideError, UnknownKey, apply_overrides
from modula_cli.config.schema import register_schemas

ROOT = Path(__file__).resolve().parents[1]
PRIVATE_IMPORT = re.compile(r"^\s*(from|import)\s+hydra\._internal", re.MULTILINE)


def test_the_installed_hydra_is_the_supported_one_and_pyproject_says_the_same():
    assert hydra.__version__ in SpecifierSet(SUPPORTED)
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"hydra-core{SUPPORTED}" in [r.replace(" ", "") for r in requirements]


def test_only_the_adapter_imports_hydra_internals():
    sources = [*(ROOT / "modula_cli").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
    users = sorted(str(p.relative_to(ROOT)) for p in sources if PRIVATE_IMPORT.search(p.read_text()))
    assert users == ["modula_cli/config/hydra_internals.py"]


def test_hydras_parser_reads_what_hydra_main_reads():
    args = args_parser().parse_args(["-m", "--config-dir", "mine", "a=1", "b=2,3"])
    assert args.multirun and args.config_dir == "mine" and args.overrides == ["a=1", "b=2,3"]


def test_the_basic_sweeper_expands_a_grid_row_by_row():
    parsed = OverridesParser.create().parse_overrides(["a=1,2", "b=x,y", "c=3"])
    assert split_sweep(parsed) == [["a=1", "b=x", "c=3"], ["a=1", "b=y", "c=3"],
                                   ["a=2", "b=x", "c=3"], ["a=2", "b=y", "c=3"]]


def test_the_composer_composes_as_hydra_main_does(tmp_path):
    register_schemas()
    mine = tmp_path / "mine" / "arch"
    mine.mkdir(parents=True)
    (mine / "tiny.yaml").write_text("defaults:\n  - gpt\n  - _self_\nwidth: 24\n")
    compose, is_group = composer(CONFIG_DIR, tmp_path / "mine")
    cfg = compose("config", ["arch=tiny", "sweep=width"])
    assert cfg.arch.width == 24 and cfg.arch.name == "gpt"  # --config-dir's file, on top of ours
    assert str(cfg.hydra.mode).endswith("MULTIRUN")  # a sweep preset turns on multirun
    assert is_group("arch") and is_group("hydra/launcher") and not is_group("train")


CASES = ["train.steps=7", "train.device=cpu", "+train.extra=1", "++train.steps=9", "++train.more={a: 1}",
         "~train.seed", "optim.lr=[0.5,0.25]", "+arch.new.deep=x"]


@pytest.mark.parametrize("line", CASES)
def test_overrides_apply_as_hydra_applies_them(line):
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # the reference: Hydra's own

    base = OmegaConf.create({"train": {"steps": 1, "device": "auto", "seed": 0}, "optim": {"lr": 0.1},
                             "arch": {"width": 8}})
    OmegaConf.set_struct(base, True)
    ours, theirs = base.copy(), base.copy()
    override = OverridesParser.create().parse_overrides([line])
    apply_overrides(override, ours)
    ConfigLoaderImpl._apply_overrides_to_config(override, theirs)
    assert OmegaConf.to_container(ours) == OmegaConf.to_container(theirs)


@dataclass
class _Steps:
    steps: int = 1


@dataclass
class _Train:
    train: _Steps = field(default_factory=_Steps)


@pytest.mark.parametrize("line, ours", [("train.stepz=1", UnknownKey), ("~train.nothing", UnknownKey),
                                        ("+train.steps=2", OverrideError), ("train.steps=abc", OverrideError)])
def test_overrides_hydra_rejects_are_rejected_in_one_line(line, ours):
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    cfg = OmegaConf.structured(_Train)  # typed, as our schemas are
    override = OverridesParser.create().parse_overrides([line])
    with pytest.raises(ConfigCompositionException):
        ConfigLoaderImpl._apply_overrides_to_config(override, cfg.copy())
    with pytest.raises(ours) as error:
        apply_overrides(override, cfg.copy())
    assert "\n" not in str(error.value) and line.lstrip("+~").split("=")[0] in str(error.value)


# --- every private use of another library, behind its adapter ------------------------------------------------

ADAPTERS = {  # the one module per library allowed to touch its private API, and why it must
    "modula_cli/config/hydra_internals.py": "Hydra 1.3 has no public parser, grid hook or config loader",
    "modula_cli/schedulers/ray_internals.py": "Ray resolves address=auto only in ray._private",
    "modula_cli/plumbing/torch_internals.py": "torch.compiler has no graph_break",
}
# the tests and scripts that must touch a private API themselves, and why
OWN_PRIVATE_USES = {
    "tests/test_hydra_internals.py": "pins the Hydra internals the adapter relies on against Hydra's own",
    "tests/prewarmed.py": "a forked command ends as the interpreter does (threading._shutdown, atexit's run)",
    "tests/test_stored_weights.py": "torch's dispatch modes live in torch.utils._python_dispatch alone",
}
# private by name, public by use: torch's foreach kernels (torch.optim's own), os._exit (documented)
PUBLIC_DESPITE_THE_NAME = re.compile(r"^torch\._foreach_\w+$|^os\._exit$")


def _own_private_names(sources: list[Path]) -> set[str]:
    """Every ``_name`` our own code defines: functions, classes, attributes, arguments, module constants."""
    names: set[str] = set()
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return {name for name in names if name.startswith("_")}


def private_uses(path: Path, own: set[str]) -> list[str]:
    """Another library's private API used in ``path``: an import of a private module; an attribute ``x._name``
    that our own code does not define (``torch._dynamo``, ``job._return_value``); any ``super()._name`` (a
    library's private method, overridden and called)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else \
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found += [f"{path.name}:{node.lineno} imports {m}" for m in modules
                  if any(part.startswith("_") and not part.startswith("__") for part in m.split("."))]
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        text = ast.unparse(node)
        on_super = isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super"
        if (node.attr not in own or on_super) and not PUBLIC_DESPITE_THE_NAME.match(text):
            found.append(f"{path.name}:{node.lineno} uses {text}")
    return found


def test_only_the_adapters_use_another_librarys_private_api():
    """Wider than the import check above: a private attribute of any library (Hydra's ``JobReturn``, argparse,
    submitit, Ray, torch) outside its adapter breaks quietly on an upgrade; in the scripts and tests too (a
    benchmark or a test that breaks on an upgrade hides what it measures or checks)."""
    sources = [path for folder in ("modula_cli", "hydra_plugins", "scripts", "tests")
               for path in (ROOT / folder).rglob("*.py")]
    own = _own_private_names(sources)
    uses = [use for path in sources if str(path.relative_to(ROOT)) not in {**ADAPTERS, **OWN_PRIVATE_USES}
            for use in private_uses(path, own)]
    assert uses == []
    assert all((ROOT / allowed).is_file() for allowed in {**ADAPTERS, **OWN_PRIVATE_USES})


def test_the_private_api_check_catches_each_kind(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from ray._private.services import x\nimport torch\nresult = job._return_value\n"
                     "torch._dynamo.reset()\ntorch._foreach_add_(a, b)\nself._mine = 1\nvalue = other._mine\n"
                     "os._exit(1)\nclass S(Base):\n    def _mine(self):\n        return super()._mine()\n")
    assert private_uses(probe, {"_mine"}) == ["probe.py:1 imports ray._private.services",
                                              "probe.py:3 uses job._return_value", "probe.py:4 uses torch._dynamo",
                                              "probe.py:11 uses super()._mine"]
