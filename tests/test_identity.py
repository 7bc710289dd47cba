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


def test_every_loop_setting_has_an_identity_decision():
    """A train.* or optim.* setting added to the schema without saying whether it changes a run's numbers, and
    which value finished runs had, would change (or silently keep) every finished run's fingerprint: each is
    in exactly one of NOT_NUMERIC and the numeric registries (FINGERPRINTED, LATER_DEFAULTS, ONLY_WHEN), and
    every entry of those names a setting that exists."""
    import dataclasses

    from modula_cli.config.identity import FINGERPRINTED, LATER_DEFAULTS, NOT_NUMERIC, ONLY_WHEN
    from modula_cli.config.schema import TrainConfig
    from modula_cli.optim.config import OptimConfig

    from modula_cli.optim.mode_settings import BLOCKS, FLAT_NAMES

    # a block's settings by the flat names the registries use (optim.mup.base_width is optim.mup_base_width)
    schema = {f"{group}.{field.name}" for group, config in (("train", TrainConfig), ("optim", OptimConfig))
              for field in dataclasses.fields(config) if not (group == "optim" and field.name in BLOCKS)}
    schema |= {f"optim.{FLAT_NAMES[f'{block}.{field.name}']}" for block, settings in BLOCKS.items()
               for field in dataclasses.fields(settings)}
    numeric = FINGERPRINTED | set(LATER_DEFAULTS) | set(ONLY_WHEN)
    undecided = sorted(schema - numeric - NOT_NUMERIC)
    assert undecided == [], f"no identity decision for {undecided} (config/identity.py)"
    assert sorted(numeric & NOT_NUMERIC) == [] and sorted(FINGERPRINTED & set(LATER_DEFAULTS)) == []
    stale = sorted(key for key in numeric | NOT_NUMERIC if key.startswith(("train.", "optim.")) and key not in schema)
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


def test_an_old_spelling_in_a_config_file_is_one_line_naming_the_new_one():
    """A config file that still sets optim.mup_base_width (the optim group takes any key) is refused before any
    run in one line per setting, naming the block spelling: read as nothing, it would train μP at the default."""
    from modula_cli.config.validate import config_problems

    cfg = compose_config("optim.mode=mup", "+optim.mup_base_width=64", "+optim.ortho_steps=3")
    assert config_problems(cfg) == [
        "optim.mup_base_width is now optim.mup.base_width: rename it in the config file that sets it (the command "
        "line still reads the old spelling)",
        "optim.ortho_steps is now optim.ortho.steps: rename it in the config file that sets it (the command line "
        "still reads the old spelling)"]
