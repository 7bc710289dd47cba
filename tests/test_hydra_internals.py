"""Hydra's private API, pinned: modula_cli/config/hydra_internals.py is the only module that uses it, every use
works on the installed hydra-core, and our override application matches Hydra's own."""

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
