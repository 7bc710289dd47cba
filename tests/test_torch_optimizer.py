"""The answer in the user's own loop: ``modula_cli.optimizer(model, config)`` trains a model in a hand-written loop
to the same losses as the tool's own run of that config, in every mode that applies to the model, with the
recipe (WSD, clipping, AdamW's decay on matrices), and resumes from its state dict."""

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import modula_cli
from helpers import TINY_TRAIN, compose_config
from modula_cli.data import build_dataset
from modula_cli.models.builders import import_builder
from modula_cli.run.trainer import train

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES / "torch_gpt"))  # torch_gpt:torch_gpt, as a user's folder holds it
STEPS = 8


def tool_losses(cfg, run_dir) -> list[float]:
    train(cfg, run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["train_loss"] for r in records if "train_loss" in r][:STEPS]


def plain_config(root, mode):
    return compose_config("arch.name=torch_gpt:torch_gpt", "+arch.head_dim=8", "arch.width=16", "arch.depth=1",
                          "optim=adamw_wsd_clip", f"optim.mode={mode}", "optim.lr=0.01", "optim.mup.base_width=8",
                          f"data.root={root}", "data.context=16", *TINY_TRAIN, f"train.steps={STEPS}")


def own_loop(model, opt, data, steps=STEPS, start=0) -> list[float]:
    losses = []
    for t in range(start, steps):
        x, y = data.train_batch(t, 8, seed=0)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("mode", ["unnormed", "mup", "muon"])
def test_a_plain_model_in_its_own_loop_trains_as_the_tools_run(mode, tmp_path, tiny_text_root):
    cfg = plain_config(tiny_text_root, mode)
    expected = tool_losses(cfg, tmp_path / "run")
    data = build_dataset("shakespeare", root=str(tiny_text_root), context=16)
    torch.manual_seed(0)  # the user builds their model their way; the tool's seed 0 draws it the same
    model = import_builder("torch_gpt:torch_gpt")(cfg.arch, data)
    opt = modula_cli.optimizer(model, cfg)
    assert isinstance(opt, torch.optim.Optimizer)
    assert own_loop(model, opt, data) == pytest.approx(expected, rel=1e-4)


def test_its_state_dict_resumes_the_schedule_and_the_moments(tmp_path, tiny_text_root):
    cfg = plain_config(tiny_text_root, "muon")
    data = build_dataset("shakespeare", root=str(tiny_text_root), context=16)

    def fresh():
        torch.manual_seed(0)
        model = import_builder("torch_gpt:torch_gpt")(cfg.arch, data)
        return model, modula_cli.optimizer(model, cfg)

    model, opt = fresh()
    whole = own_loop(model, opt, data)
    model, opt = fresh()
    first = own_loop(model, opt, data, steps=3)
    saved = {"model": {k: v.clone() for k, v in model.state_dict().items()}, "opt": opt.state_dict()}
    model, opt = fresh()
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    assert opt.lr_now == pytest.approx(0.01)  # WSD's stable phase at step 3 of 8
    assert first + own_loop(model, opt, data, start=3) == pytest.approx(whole, rel=1e-5)


@pytest.mark.parametrize("mode", ["normed", "dualized"])
def test_a_network_of_atoms_in_its_own_loop_trains_as_the_tools_run(mode, tmp_path, tiny_text_root):
    from modula_cli.models import build_model
    from modula_cli.models.variant import variant_of

    cfg = compose_config("arch=gpt", "arch.width=16", "arch.depth=1", "arch.heads=2", "variant=modular",
                         f"optim.mode={mode}", "optim.lr=0.05", "optim.schedule=wsd", "optim.grad_clip=1.0",
                         f"data.root={tiny_text_root}", "data.context=16", *TINY_TRAIN, f"train.steps={STEPS}")
    expected = tool_losses(cfg, tmp_path / "run")
    data = build_dataset("shakespeare", root=str(tiny_text_root), context=16)
    net = build_model(cfg.arch, data, variant_of(cfg))  # the user's network, as their builder makes it
    weights = [w.requires_grad_() for w in net.initialize(seed=0)]
    opt = modula_cli.optimizer(net, cfg, weights=weights)
    losses = []
    for t in range(STEPS):
        x, y = data.train_batch(t, 8, seed=0)
        logits = net(x, weights)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert losses == pytest.approx(expected, rel=1e-4)


def test_a_model_that_is_not_the_configs_network_is_one_line(tiny_text_root):
    cfg = plain_config(tiny_text_root, "mup")
    data = build_dataset("shakespeare", root=str(tiny_text_root), context=16)
    other = import_builder("torch_gpt:torch_gpt")(compose_config(
        "arch.name=torch_gpt:torch_gpt", "+arch.head_dim=8", "arch.width=32", "arch.depth=1").arch, data)
    with pytest.raises(ValueError, match=r"the model is not the config's network: .* is \(.*32.*\), the config "
                                         r"builds \(.*16.*\) \(set the overrides to your model's arch.width"):
        modula_cli.optimizer(other, cfg)
    with pytest.raises(ValueError, match=r"optim.lr=\[0.01, 0.02\] is a packed list"):
        modula_cli.optimizer(other, cfg, "optim.lr=[0.01,0.02]")
