"""The variant config group as a user meets it: composition, identity, bad input, runs, packing, resume, report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from helpers import compose_config, tiny_gpt, tiny_image
from modula_cli.config import CONFIG_DIR
from modula_cli.config.identity import fingerprint, run_name
from modula_cli.run.trainer import train
from modula_cli.config.validate import config_problems
from modula_cli.models.variant import VARIANTS, Variant, folder_suffix
from test_train import assert_same_losses, interrupted_at, read_losses
import prewarmed

PAPER_FIELDS = {"attention_third": "qkv", "scales": "forward", "embed_rows": "unit", "conv_normalize": "slice",
                "extra_step": True}
PAPER_EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment" / "paper").glob("fig*.yaml"))


def test_the_default_is_paper_and_modular_is_the_earlier_behaviour():
    modular, paper = compose_config("variant=modular"), compose_config()
    assert OmegaConf.to_container(modular.variant) == {"attention_third": "output", "scales": "weights",
                                                       "embed_rows": "decay", "conv_normalize": "kernel",
                                                       "extra_step": False}
    assert OmegaConf.to_container(paper.variant) == PAPER_FIELDS
    assert (modular.optim.normed.power_iterations, paper.optim.normed.power_iterations) == (2, 1)
    # a user's own setting still wins over the variant's
    assert compose_config("optim.normed.power_iterations=3").optim.normed.power_iterations == 3


@pytest.mark.parametrize("experiment", PAPER_EXPERIMENTS)
def test_every_paper_experiment_selects_the_paper_variant(experiment):
    cfg = compose_config(f"experiment=paper/{experiment}")
    assert OmegaConf.to_container(cfg.variant) == PAPER_FIELDS and cfg.optim.normed.power_iterations == 1
    if cfg.arch.name == "gpt":
        assert cfg.arch.heads == 8  # the paper's sweeps (paper/sweep/sweep.sh) and main.py's default


def test_modular_runs_keep_their_fingerprints_and_paper_runs_differ():
    modular = compose_config("optim.lr=0.25", "variant=modular")
    without_variant = OmegaConf.create({k: v for k, v in OmegaConf.to_container(modular).items() if k != "variant"})
    assert fingerprint(modular) == fingerprint(without_variant)  # a run finished before variants existed
    assert fingerprint(compose_config("optim.lr=0.25", "variant=paper")) != fingerprint(modular)
    custom = compose_config("optim.lr=0.25", "variant=modular", "variant.extra_step=true")
    paper = compose_config("optim.lr=0.25", "variant=paper")
    assert fingerprint(custom) not in (fingerprint(modular), fingerprint(paper))


def test_run_folders_do_not_name_the_variant_its_sweep_folder_does():
    """Typing the default (variant=paper) or the variant of every earlier run (variant=modular) finds the same
    run folders as leaving it out: the sweep folder (…_paper, or none for modular) tells the variants apart."""
    for variant in ("variant=paper", "variant=modular", "variant.extra_step=true"):
        assert run_name([variant, "optim.lr=0.25", "arch.width=64"]) == "lr=0.25,width=64"


def test_one_launch_sweeps_one_variant(tmp_path, tiny_text_root):
    import sys

    args = tiny_gpt(tiny_text_root, "train.steps=2", "variant=modular,paper", f"hydra.sweep.dir={tmp_path / 's'}")
    result = prewarmed.run([sys.executable, "-m", "modula_cli.train", "-m", *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "this launch sweeps 2 variants (modular, paper)" in result.stdout + result.stderr
    assert not any((tmp_path / "s").glob("*/summary.json"))  # refused before any run


@pytest.mark.parametrize(("override", "message"), [
    ("variant.scales=fwd", "variant.scales='fwd'; allowed: weights, forward"),
    ("variant.extra_step=1", "variant.extra_step=1; allowed: False, True"),
    ("variant.attention_third=query", "variant.attention_third='query'; allowed: output, qkv"),
])
def test_bad_variant_settings_are_named(override, message):
    assert message in config_problems(compose_config("variant=paper", override))


def steps_and_lrs(run_dir: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["lr"]) for r in records if "lr" in r]


def test_a_paper_run_takes_one_more_step_at_lr_zero_and_says_so(tmp_path, tiny_text_root):
    paper = train(compose_config(*tiny_gpt(tiny_text_root, "variant=paper", "train.steps=6", "optim.lr=0.2")),
                  tmp_path / "paper").summary
    modular = train(compose_config(*tiny_gpt(tiny_text_root, "variant=modular", "train.steps=6", "optim.lr=0.2")),
                    tmp_path / "modular").summary
    assert (paper["variant"], paper["steps_done"]) == ("paper", 7)
    assert (modular["variant"], modular["steps_done"]) == ("modular", 6)
    assert steps_and_lrs(tmp_path / "paper")[-1] == (6, 0.0)
    assert steps_and_lrs(tmp_path / "modular")[-1] == (5, pytest.approx(0.2 / 6))
    assert paper["settings"]["variant.scales"] == "forward" and "variant.scales" not in modular["settings"]


@pytest.mark.parametrize("arch, mode, lrs", [("gpt", "unnormed", (0.003, 0.01)), ("gpt", "normed", (0.05, 0.2)),
                                             ("resnet", "normed", (0.1, 0.2))])
def test_paper_packed_run_matches_separate_runs(arch, mode, lrs, tmp_path, tiny_text_root, cifar_root):
    def config(*extra):
        common = ["variant=paper", f"optim.mode={mode}", "train.steps=8", *extra]
        return compose_config(*(tiny_gpt(tiny_text_root, *common) if arch == "gpt"
                                else tiny_image(arch, cifar_root, *common)))

    result = train(config(f"optim.lr=[{lrs[0]},{lrs[1]}]"), tmp_path / "pack")
    for lr, member in zip(lrs, result.members):
        separate = train(config(f"optim.lr={lr}"), tmp_path / f"separate_{lr}").summary
        assert_same_losses(tmp_path / "pack" / f"lr={lr!r}", tmp_path / f"separate_{lr}")
        assert member["fingerprint"] == separate["fingerprint"] and member["steps_done"] == 9


def test_paper_run_resumes_exactly_through_its_extra_step(tmp_path, tiny_text_root, monkeypatch):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "variant=paper", "train.steps=12", "train.checkpoint_every=5"))
    reference = train(cfg, tmp_path / "reference").summary
    interrupted_at(monkeypatch, 12, lambda: train(cfg, tmp_path / "resumed"))  # during the extra step
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["state"]["step"] == 13
    resumed = train(cfg, tmp_path / "resumed").summary
    assert read_losses(tmp_path / "resumed") == read_losses(tmp_path / "reference")
    assert resumed["train_loss"] == reference["train_loss"] and resumed["steps_done"] == 13


def test_the_paper_variant_reaches_the_network_that_trains(tmp_path, tiny_text_root):
    """Through the config, not only in unit tests: the run's network has the reference's scales."""
    from modula_cli.models import build_model
    from modula_cli.models.variant import variant_of

    cfg = compose_config(*tiny_gpt(tiny_text_root, "variant=paper"))
    assert variant_of(cfg) == VARIANTS["paper"]
    data = type("Data", (), {"name": "shakespeare", "kind": "language", "vocab_size": 11, "context": 16})()
    net = build_model(cfg.arch, data, variant_of(cfg))
    assert next(net.atoms()).forward_scale == pytest.approx(4.0)  # √16: the token embedding


def test_each_variant_sweeps_into_a_folder_of_its_own():
    """outputs/sweeps/quick/gpt_shakespeare holds modular runs (every sweep before variants), …_paper the
    default's: a sweep of one variant never retrains another's finished runs in place."""
    assert folder_suffix(VARIANTS["modular"]) == "" and folder_suffix(VARIANTS["paper"]) == "_paper"
    custom = folder_suffix(Variant(extra_step=True))
    assert custom.startswith("_custom-") and custom != folder_suffix(Variant(embed_rows="unit"))
    assert "${variant_folder:${variant},${arch.name}}" in (CONFIG_DIR / "config.yaml").read_text()


def test_no_variant_applies_to_a_plain_torch_model(tmp_path, monkeypatch):
    """The variants are two readings of the modular-norm networks: a builder whose files never import modula_cli
    returns a plain torch model, which trains as its code says under either (no LR-0 step, no _paper folder, the
    variant "none" in its series and identity); a builder of this library's atoms, even from a module it imports,
    gets the variant asked for."""
    from modula_cli.config.resolvers import variant_folder
    from modula_cli.models.variant import name_of, variant_of

    (tmp_path / "plain.py").write_text("import torch\nfrom layers import Wide\n\ndef build(arch, data): ...\n")
    (tmp_path / "layers.py").write_text("import torch\nWide = torch.nn.Linear\n")
    (tmp_path / "atoms.py").write_text("from parts import block\n\ndef build(arch, data): ...\n")
    (tmp_path / "parts.py").write_text("from modula_cli.nn import Linear\nblock = Linear\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    paper = OmegaConf.create(dataclasses.asdict(VARIANTS["paper"]))
    for arch, applies in (("plain:build", False), ("atoms:build", True), ("gpt", True)):
        cfg = OmegaConf.create({"arch": {"name": arch}, "variant": paper})
        assert variant_of(cfg) == (VARIANTS["paper"] if applies else VARIANTS["modular"]), arch
        assert name_of(cfg) == ("paper" if applies else "none"), arch
        assert variant_folder(paper, arch) == ("_paper" if applies else ""), arch


def test_the_paper_variant_trains_one_iteration_more_at_lr_0():
    """The reference loop runs steps + 1 iterations, the last at LR 0; the modular variant runs steps."""
    from modula_cli.models.variant import Variant, iterations, variant_of

    assert iterations(10, variant_of(compose_config("variant=paper"))) == 11
    assert iterations(10, variant_of(compose_config("variant=modular"))) == 10
    assert iterations(1, Variant(extra_step=True)) == 2
