"""Every default trains: each architecture × optimiser × mode × variant at its defaults (the mode's default LR
for that architecture and variant, the architecture's default sizes, the variant's parametrisation) takes a few
steps on generated data in the real formats, and its loss stays finite and falls. The batch and the context are
made small (they set the cost, not the parametrisation); a default that did not train (μP and plain SGD on the
ResMLP, ResNet's width below μP's base) fails here."""

import json
import math

import pytest

from helpers import compose_config, paired_drop, record_first_update
from modula_cli.optim.modes import MODES
from modula_cli.run.trainer import train

ARCHS = ("gpt", "standard_gpt", "resmlp", "resnet")
# enough steps for the loss to fall at the default LR: SGD's momentum builds over its first steps (μP's SGD on the
# ResMLP, at 2^-8, shows no drop after 20), Adam's first steps are full size
STEPS = {"adam": 12, "sgd": 30}
SMALL = ["train.batch_size=4", "train.log_every=1", "train.eval_every=0", "train.eval_batches=1",
         "train.progress=false", "train.device=cpu", "train.checkpoint_every=0"]


@pytest.mark.parametrize("variant", ["paper", "modular"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_default_trains(arch, optimizer, mode, variant, tmp_path, tiny_text_root, cifar_root, monkeypatch):
    data = [f"data.root={tiny_text_root}", "data.context=32"] if "gpt" in arch else \
        ["data=cifar10", f"data.root={cifar_root}", "data.augment=none"]
    steps = STEPS[optimizer]
    cfg = compose_config(f"arch={arch}", f"optim={optimizer}", f"optim.mode={mode}", f"variant={variant}", *data,
                         *SMALL, f"train.steps={steps}")
    assert cfg.optim.lr is None  # the default LR, whatever it is
    seen = record_first_update(monkeypatch)
    summary = train(cfg, tmp_path / "run").summary
    assert summary["lr"] == MODES[mode].default_lr(optimizer, arch, cfg.variant.scales)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [record["train_loss"] for record in records if "train_loss" in record]
    assert summary["status"] == "completed", (summary["status"], losses)
    assert len(losses) >= steps and all(math.isfinite(loss) for loss in losses), losses
    # falling: the last logged steps' losses are below the same batches' losses under the initial weights
    assert paired_drop(cfg, seen["initial"], seen["net"], tmp_path / "run") > 0, losses
