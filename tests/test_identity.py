"""Finished runs keep their fingerprints: the values below were computed by the version before the report
recorded experiment settings and before train.threads existed (commit 8e23858). A change that alters them
would make every user's finished runs train again. Those runs were all of the modular variant, which a
relaunch now names (`variant=modular`: the default became `paper`)."""

import hashlib
import json
from pathlib import Path

import pytest

from helpers import compose_config
from modula_cli.config.identity import experiment_settings, fingerprint

PINNED = {
    (): "4a0609297a8e60b1",
    ("optim.mode=dualized",): "fd06626de186bd64",
    # manifold mode's first design (every layer at a fixed radius): its runs keep their fingerprints
    ("optim.mode=manifold", "optim.manifold.scaled=[]", "optim.manifold.free=[]"): "8ce18275eebb4226",
    ("arch=resmlp", "data=cifar10"): "9e762f254ccd2378",
    ("optim=sgd", "optim.mode=unnormed", "optim.lr=1"): "a1dcdf1344f79c73",
    ("sweep=quick",): "c4c8e1d51191be7a",
    # numbers typed as integers are hashed as given (the schema's nodes are plain, not typed)
    ("sweep=mass", "arch.blocks_mass=1", "optim.wd=0", "train.diverge_factor=3"): "a1c1ce37ff8678ed",
}


@pytest.mark.parametrize("overrides", list(PINNED))
def test_fingerprints_are_unchanged(overrides):
    cfg = compose_config(*overrides, "variant=modular")
    assert fingerprint(cfg) == PINNED[overrides]
    assert fingerprint(compose_config(*overrides, "variant=modular", "train.threads=1")) == PINNED[overrides]
    assert fingerprint(compose_config(*overrides)) != PINNED[overrides]  # the paper variant, the default


def test_experiment_settings_are_the_fingerprinted_settings_less_lr_and_seed():
    cfg = compose_config("sweep=quick")
    settings = experiment_settings(cfg)
    assert settings["train.steps"] == 400 and settings["data.context"] == 64 and settings["arch.width"] == 64
    assert "optim.lr" not in settings and "train.seed" not in settings and "train.threads" not in settings
    assert experiment_settings(compose_config("sweep=quick", "optim.lr=0.5", "train.seed=3")) == settings
    assert experiment_settings(compose_config("sweep=quick", "train.steps=100")) != settings


def test_a_builders_digest_covers_the_modules_of_its_folder_it_imports(tmp_path, monkeypatch):
    """nanoGPT's builder imports model.py beside it: an edit of model.py is another network, an edit of an installed
    library's file is not looked at, and a builder that imports nothing of its folder hashes as its file alone."""
    import hashlib

    from modula_cli.plumbing.user_code import source_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 1\n")
    (tmp_path / "model.py").write_text("import math\nfrom pkg.layers import WIDTH\n")
    (tmp_path / "builder.py").write_text("import torch\nfrom model import WIDTH\n\ndef build(arch, data): ...\n")
    (tmp_path / "alone.py").write_text("import torch\n\ndef build(arch, data): ...\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    digests = [source_digest("builder:build")]
    (tmp_path / "model.py").write_text("import math\nfrom pkg.layers import WIDTH  # edited\n")
    digests.append(source_digest("builder:build"))
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 2\n")  # two imports away
    digests.append(source_digest("builder:build"))
    assert len(set(digests)) == 3 and None not in digests
    assert source_digest("alone:build") == hashlib.sha256((tmp_path / "alone.py").read_bytes()).hexdigest()[:12]


def test_a_builder_edited_in_place_is_read_again(tmp_path, monkeypatch):
    """The parse of a builder's files is kept for the plan's many runs, by content: an edit of the same size in the
    same second (a helper module that now imports modula_cli) makes the network this library's, at once."""
    from modula_cli.plumbing.user_code import plain_torch_builder

    (tmp_path / "builder.py").write_text("import torch\nimport helper\n\ndef build(arch, data): ...\n")
    (tmp_path / "helper.py").write_text("import collections.abc\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [plain_torch_builder("builder:build") for _ in range(3)] == [True] * 3
    (tmp_path / "helper.py").write_text("import modula_cli.nn  \n")  # the same 22 bytes
    assert plain_torch_builder("builder:build") is False


def test_a_packed_jobs_progress_label_is_whole_where_its_folder_name_is_cut():
    """A packed job's folder name past 120 bytes keeps its knobs cut and hashed; its progress line names what the
    runs share and each packed list's span and count in full. An unpacked job is named by its folder."""
    from modula_cli.config.identity import MAX_NAME_BYTES, job_label, run_name

    lrs = ",".join(repr(2.0**e * 1.0000000001) for e in range(-9, -6))  # three long LRs, more knobs: over 120
    packed = ["data.context=64", f"optim.lr=[{lrs}]", "train.seed=[0,1]", "arch.width=128", "arch.depth=8",
              "optim.wd=0.0001", "train.batch_size=256"]
    assert len(run_name(packed).encode()) <= MAX_NAME_BYTES and ",h=" in run_name(packed)
    assert job_label(packed) == ("batch_size=256,context=64,depth=8,wd=0.0001,width=128: lr 0.00195…0.00781 (3), "
                                 "seed 0…1 (2)")
    assert job_label(["optim.lr=[0.5]"]) == "lr 0.5 (1)"
    assert job_label(["optim.lr=0.25", "arch.width=64"]) == run_name(["optim.lr=0.25", "arch.width=64"])


def test_a_block_settings_new_spelling_names_the_folder_its_runs_were_finished_in():
    """The committed tables' runs that set a mode's setting (``muon_scale=…``, ``muon_adam_ratio=…``,
    ``mup_depth=…``) were trained before the settings moved into blocks: the same sweep typed with the block
    spelling (``optim.muon.scale``) must name the same folders, or a relaunch would train them all again."""
    import csv

    from modula_cli.config.identity import run_name

    full = {"lr": "optim.lr", "seed": "train.seed", "mode": "optim.mode", "width": "arch.width",
            "depth": "arch.depth", "arch": "arch", "context": "data.context", "muon_scale": "optim.muon.scale",
            "muon_adam_ratio": "optim.muon.adam_ratio", "mup_depth": "optim.mup.depth"}
    blocks = {"muon_scale", "muon_adam_ratio", "mup_depth"}
    names = [row["run"] for table in sorted((Path(__file__).parents[1] / "docs" / "results").rglob("results.csv"))
             for row in csv.DictReader(table.open()) if {p.partition("=")[0] for p in row["run"].split(",")} & blocks]
    assert len(names) >= 450  # depth_recipes, own_model_width, own_model_muon_ratio, own_model_hf_gpt2, …
    for name in names:
        overrides = [f"{full[key]}={value}" for key, _, value in (part.partition("=") for part in name.split(","))]
        assert run_name(overrides) == name, overrides


def test_every_loop_setting_has_an_identity_decision():
    """A train.*, optim.*, arch.* or data.* setting added to the schema without saying whether it changes a run's
    numbers, and which value finished runs had, would change (or silently keep) every finished run's fingerprint:
    each is in exactly one of NOT_NUMERIC and the numeric registries (FINGERPRINTED, LATER_DEFAULTS, ONLY_WHEN),
    and every entry of those names a setting that exists (data.*: or a dataset builder's option, data.num_proc)."""
    import dataclasses

    from modula_cli.config.identity import FINGERPRINTED, LATER_DEFAULTS, NOT_NUMERIC, ONLY_WHEN
    from modula_cli.config.schema import TrainConfig
    from modula_cli.data.config import DataConfig
    from modula_cli.models.config import ArchConfig
    from modula_cli.optim.config import OptimConfig

    from modula_cli.optim.mode_settings import BLOCKS, FLAT_NAMES

    # a block's settings by the flat names the registries use (optim.mup.base_width is optim.mup_base_width)
    groups = (("train", TrainConfig), ("optim", OptimConfig), ("arch", ArchConfig), ("data", DataConfig))
    schema = {f"{group}.{field.name}" for group, config in groups
              for field in dataclasses.fields(config) if not (group == "optim" and field.name in BLOCKS)}
    schema |= {f"optim.{FLAT_NAMES[f'{block}.{field.name}']}" for block, settings in BLOCKS.items()
               for field in dataclasses.fields(settings)}
    numeric = FINGERPRINTED | set(LATER_DEFAULTS) | set(ONLY_WHEN)
    undecided = sorted(schema - numeric - NOT_NUMERIC)
    assert undecided == [], f"no identity decision for {undecided} (config/identity.py)"
    assert sorted(numeric & NOT_NUMERIC) == [] and sorted(FINGERPRINTED & set(LATER_DEFAULTS)) == []
    stale = sorted(key for key in numeric | NOT_NUMERIC if key not in schema and key != "data.num_proc")
    assert stale == [], f"decided but not in the schema: {stale}"


# Every experiment of configs/experiment/ (whose runs are the committed docs/results/ tables) in the modes, and each
# block's settings away from its defaults, fingerprinted with their flat spellings by the version before the blocks
# (optim.mup_base_width, at 70915b0): the fingerprints and the tables' experiment settings (a digest) of each.
BEFORE_BLOCKS = Path(__file__).parent / "data" / "fingerprints_before_blocks.json"


def test_the_settings_blocks_change_no_fingerprint():
    """optim.mup.base_width and its old spelling optim.mup_base_width give the fingerprint and the experiment
    settings that the version before the blocks gave, for every case pinned then (72 configs, 31 fingerprints)."""
    from modula_cli.optim.mode_settings import rewrite_old_spellings

    cases = json.loads(BEFORE_BLOCKS.read_text())
    said: list[str] = []
    changed = []
    for case in cases:
        overrides = rewrite_old_spellings(case["overrides"], said.append)
        cfg = compose_config(*overrides)
        settings = hashlib.sha256(json.dumps(experiment_settings(cfg), sort_keys=True).encode()).hexdigest()[:16]
        if (fingerprint(cfg), settings) != (case["fingerprint"], case["settings"]):
            changed.append(case["overrides"])
    assert changed == [], f"{len(changed)} of {len(cases)} changed, e.g. {changed[:3]}"
    assert len({case["fingerprint"] for case in cases}) == 31
    assert "optim.mup_base_width is now optim.mup.base_width; the old spelling is read until the next release" in said
    assert "optim.ortho is now optim.ortho.method; the old spelling is read until the next release" in said


def test_an_old_spelling_on_the_command_line_is_read_with_one_line(tmp_path):
    """optim.mup_base_width=64 (before the blocks) trains as optim.mup.base_width=64, saying the new spelling once
    however often it is given; optim.ortho={method:svd} is the block already, and flags are left alone."""
    from modula_cli.optim.mode_settings import rewrite_old_spellings

    said: list[str] = []
    argv = ["-m", "optim.mup_base_width=64", "+optim.muon_scale=spectral", "optim.ortho=svd",
            "optim.mup_base_width=32,64", "optim.ortho.steps=3", "optim.ortho={method:svd}", "arch.width=64"]
    assert rewrite_old_spellings(argv, said.append) == [
        "-m", "optim.mup.base_width=64", "+optim.muon.scale=spectral", "optim.ortho.method=svd",
        "optim.mup.base_width=32,64", "optim.ortho.steps=3", "optim.ortho={method:svd}", "arch.width=64"]
    assert said == ["optim.mup_base_width is now optim.mup.base_width; the old spelling is read until the next "
                    "release", "optim.muon_scale is now optim.muon.scale; the old spelling is read until the next "
                    "release", "optim.ortho is now optim.ortho.method; the old spelling is read until the next release"]


def test_an_old_spelling_in_a_config_file_is_read_with_one_line():
    """A config file that still sets optim.mup_base_width or optim.ortho: svd (the optim group takes any key) trains
    as its block spelling would, the same fingerprint, saying the new spelling once per setting: read as nothing,
    it would train μP at the default."""
    from modula_cli.config.validate import config_problems

    cfg = compose_config("optim.mode=mup", "+optim.mup_base_width=64", "+optim.ortho_steps=3", "optim.ortho=svd")
    with pytest.warns(FutureWarning) as said:
        assert config_problems(cfg) == []
    assert sorted(str(w.message) for w in said) == [
        f"optim.{old} is now optim.{new}; the old spelling is read until the next release"
        for old, new in (("mup_base_width", "mup.base_width"), ("ortho", "ortho.method"),
                         ("ortho_steps", "ortho.steps"))]
    assert "mup_base_width" not in cfg.optim and "ortho_steps" not in cfg.optim
    assert (cfg.optim.mup.base_width, cfg.optim.ortho.steps, cfg.optim.ortho.method) == (64, 3, "svd")
    new = compose_config("optim.mode=mup", "optim.mup.base_width=64", "optim.ortho.steps=3", "optim.ortho.method=svd")
    assert fingerprint(cfg) == fingerprint(new) != fingerprint(compose_config("optim.mode=mup"))
    # the block spelling set too (a sweep over it on the command line): two values for one setting, refused
    both = compose_config("optim.mode=mup", "+optim.mup_base_width=64", "optim.mup.base_width=128")
    assert config_problems(both) == ["optim.mup_base_width=64 (its old spelling, in a config file) and "
                                     "optim.mup.base_width=128 both set it: keep one"]


def test_a_run_config_saved_before_the_blocks_builds_its_optimiser():
    """modula_cli.optimizer(model, "…/config.yaml") on a run finished before the settings blocks: its saved optim
    node has the flat keys only (no block), and gives the settings the run trained with."""
    from omegaconf import OmegaConf

    from modula_cli.config.validate import checked_optim

    cfg = compose_config("optim.mode=muon")
    saved = OmegaConf.to_container(cfg, resolve=True)
    for block in ("normed", "ortho", "manifold", "mup", "muon"):
        del saved["optim"][block]
    saved["optim"].update(muon_scale="spectral", muon_adam_ratio=0.5, ortho="svd", power_iterations=3)
    with pytest.warns(FutureWarning):
        opt = checked_optim(OmegaConf.create(saved))
    assert (opt.muon.scale, opt.muon.adam_ratio, opt.ortho.method, opt.normed.power_iterations) == (
        "spectral", 0.5, "svd", 3)
    assert opt.mup.base_width == 32  # a block the saved config lacks: its defaults
    # a config read without the check (the coordinate check's points): the same reading, the caller's dict untouched
    from modula_cli.optim.config import OptimConfig

    given = {"mode": "mup", "mup_base_width": 64, "ortho": "svd", "mup": {"base_width": 32}}
    opt = OptimConfig.of(given)
    assert (opt.mup.base_width, opt.ortho.method) == (64, "svd") and given["mup"] == {"base_width": 32}
