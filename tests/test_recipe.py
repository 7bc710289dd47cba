"""A user's training recipe: WSD with a floor, gradient clipping, accumulation, weight decay on matrices only:
each against an independent reference (the formula by hand, ``clip_grad_norm_``, one big batch)."""

import json
import math

import pytest
import torch

from helpers import compose_config, interrupted_at_step_12, optim_config, tiny_gpt
from modula_cli.config.identity import fingerprint
from modula_cli.config.validate import config_problems
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.optim.clip import ClipRecord, clip_gradients
from modula_cli.optim.schedule import schedule_factor
from modula_cli.optim.step import lr_factor
from modula_cli.run.trainer import train


def test_wsd_factor_at_every_phase():
    """100 steps, 10 warm-up, the last 20 cooling down: warm-up (t+1)/10, then 1 to step 79, then from 1 at step 80
    towards the floor in the cool-down's shape, one step's worth above it at step 99."""
    total, warmup = 100, 10
    for t in range(10):
        assert schedule_factor("wsd", t, total, warmup) == (t + 1) / 10
    assert all(schedule_factor("wsd", t, total, warmup) == 1.0 for t in range(10, 80))
    for shape, by_hand in (("linear", lambda p: 1 - p), ("cosine", lambda p: (1 + math.cos(math.pi * p)) / 2),
                           ("1-sqrt", lambda p: 1 - math.sqrt(p))):
        for t in range(80, 100):
            p = (t - 80) / 20
            assert schedule_factor("wsd", t, total, warmup, 0.1, 0.2, shape) == pytest.approx(0.1 + 0.9 * by_hand(p))
    assert schedule_factor("wsd", 99, total, warmup, 0.0, 0.2, "linear") == pytest.approx(0.05)
    assert schedule_factor("wsd", 100, total, warmup) == 0.0  # the paper variant's extra iteration
    # a cool-down over the whole run starts after the warm-up; a tiny fraction still cools for one step
    assert schedule_factor("wsd", 10, total, warmup, decay_fraction=1.0, decay_shape="linear") == 1.0
    assert schedule_factor("wsd", 11, total, warmup, decay_fraction=1.0, decay_shape="linear") == pytest.approx(
        1 - 1 / 90)
    assert schedule_factor("wsd", 98, total, 0, decay_fraction=0.001) == 1.0
    assert schedule_factor("wsd", 99, total, 0, decay_fraction=0.001) == 1.0  # its one step starts at 1


def test_every_schedule_decays_to_its_floor():
    """linear and cosine end one step's worth above lr × min_lr_ratio; constant never decays."""
    assert schedule_factor("linear", 99, 100, min_ratio=0.1) == pytest.approx(0.1 + 0.9 * 0.01)
    assert schedule_factor("cosine", 50, 100, min_ratio=0.2) == pytest.approx(0.2 + 0.8 * 0.5)
    assert schedule_factor("constant", 99, 100, min_ratio=0.5) == 1.0
    opt = optim_config(schedule="wsd", warmup_fraction=0.1, min_lr_ratio=0.1, decay_fraction=0.5, decay_shape="linear")
    assert [round(lr_factor(opt, t, 10), 6) for t in range(10)] == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.82, 0.64, 0.46,
                                                                     0.28]


def _grads(seed: int, shapes=((5, 3), (3,), (2, 4, 4))) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=generator) * 3 for shape in shapes]


@pytest.mark.parametrize("max_norm", [0.5, 1.0, 100.0])
def test_clipping_equals_clip_grad_norm(max_norm):
    grads = _grads(0)
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    record = ClipRecord.on(1, torch.device("cpu"))
    clipped = clip_gradients(grads, max_norm, record, None)
    for ours, theirs in zip(clipped, params):
        torch.testing.assert_close(ours, theirs.grad)
    assert float(record.norm[0]) == pytest.approx(float(norm))
    assert float(record.clipped[0]) == (1.0 if float(norm) > max_norm else 0.0)


def test_packed_clipping_clips_each_member_by_its_own_norm():
    members = [_grads(k) for k in range(3)]
    members[1] = [g / 100 for g in members[1]]  # below the limit: untouched
    packed = [torch.stack(parts) for parts in zip(*members)]
    record = ClipRecord.on(3, torch.device("cpu"))
    clipped = clip_gradients(packed, 1.0, record, 3)
    for k, grads in enumerate(members):
        alone = clip_gradients(grads, 1.0, ClipRecord.on(1, torch.device("cpu")), None)
        for ours, theirs in zip(clipped, alone):
            torch.testing.assert_close(ours[k], theirs)
    assert record.clipped.tolist() == [1.0, 0.0, 1.0]


def _plain_network():
    from modula_cli.nn.torch_network import TorchNetwork

    torch.manual_seed(0)
    return TorchNetwork(lambda: torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6),
                                                    torch.nn.Linear(6, 3)))


def test_clipped_sgd_step_equals_torch_sgd_after_clip_grad_norm():
    """Unnormed SGD without momentum under clipping is torch.optim.SGD on the clipped gradient."""
    net = _plain_network()
    weights = [w.clone() for w in net.initialize(seed=0)]
    grads = [torch.randn_like(w) * 5 for w in weights]
    cfg = optim_config(name="sgd", mode="unnormed", lr=0.1, beta1=0.0, schedule="constant", grad_clip=0.7)
    state = init_state(weights, cfg)
    ours = [w.clone() for w in weights]
    optimizer_step(net, ours, [g.clone() for g in grads], state, cfg, 0, 10)
    params = [torch.nn.Parameter(w.clone()) for w in weights]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(params, 0.7)
    torch.optim.SGD(params, lr=0.1).step()
    for mine, theirs in zip(ours, params):
        torch.testing.assert_close(mine, theirs.detach())


@pytest.mark.parametrize("decay_on", ["all", "matrices"])
def test_weight_decay_on_matrices_leaves_gains_and_biases(decay_on):
    """Zero gradients and weight decay: under ``matrices`` only the two Linear weights shrink (by 1 − lr·wd, as
    AdamW's decoupled decay in the unnormed mode); under ``all`` the biases and LayerNorm's too."""
    net = _plain_network()
    weights = [w.clone() + 0.5 for w in net.initialize(seed=0)]  # nonzero gains and biases
    cfg = optim_config(name="sgd", mode="unnormed", lr=0.1, beta1=0.0, schedule="constant", wd=0.5,
                      decay_on=decay_on)
    after = [w.clone() for w in weights]
    optimizer_step(net, after, [torch.zeros_like(w) for w in weights], init_state(weights, cfg), cfg, 0, 10)
    for atom, before, now in zip(net.atom_list(), weights, after):
        decayed = decay_on == "all" or before.ndim >= 2
        assert atom.is_matrix == (before.ndim >= 2)
        torch.testing.assert_close(now, before * (1 - 0.05) if decayed else before)


def _losses(run_dir):
    return [r["train_loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if "train_loss" in r]


@pytest.mark.parametrize("optimizer,mode,packed", [("sgd", "unnormed", False), ("adam", "unnormed", True),
                                                   ("adam", "normed", True), ("adam", "dualized", False),
                                                   ("adam", "manifold", False), ("sgd", "mup", True),
                                                   ("adam", "muon", False)])
def test_accumulated_micro_batches_train_as_one_big_batch(optimizer, mode, packed, tmp_path, tiny_text_root):
    """train.grad_accum=4 gives one batch of 8's losses, to float error, in every mode (packed too); SGD sees the
    gradient's scale (Adam and the normed modes do not), and the clipping limit sits among the norms."""
    lr = "optim.lr=[0.01,0.02]" if packed else "optim.lr=0.01"
    base = tiny_gpt(tiny_text_root, f"optim={optimizer}", f"optim.mode={mode}", lr, "train.steps=6",
                    "optim.grad_clip=3.0", "optim.mup.base_width=16")
    one = train(compose_config(*base), tmp_path / "one")
    four = train(compose_config(*base, "train.grad_accum=4"), tmp_path / "four")
    for a, b in zip(one.members, four.members, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    runs = sorted(p for p in (tmp_path / "one").rglob("metrics.jsonl"))
    for path in runs:
        twin = tmp_path / "four" / path.relative_to(tmp_path / "one")
        assert _losses(path.parent) == pytest.approx(_losses(twin.parent), rel=1e-4)


def test_clipping_is_logged_and_resumes_its_count(tmp_path, tiny_text_root, monkeypatch):
    """Each logged step says the norm before clipping and the fraction of steps clipped so far; a run stopped at
    step 12 and resumed logs what the uninterrupted one does."""
    cfg = compose_config(*tiny_gpt(tiny_text_root, "optim.mode=unnormed", "optim.lr=0.01", "train.steps=16",
                                   "optim.grad_clip=0.8", "variant=modular", "train.checkpoint_every=5"))
    train(cfg, tmp_path / "whole")
    interrupted_at_step_12(cfg, tmp_path / "resumed", monkeypatch)
    train(cfg, tmp_path / "resumed")
    logs = {}
    for name in ("whole", "resumed"):
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        logs[name] = {r["step"]: (r["grad_norm"], r["clip_rate"]) for r in records if "grad_norm" in r}
    assert sorted(logs["whole"]) == list(range(16)) and logs["resumed"] == logs["whole"]
    clipped = 0
    for step, (norm, rate) in sorted(logs["whole"].items()):
        clipped += norm > 0.8
        assert rate == pytest.approx(clipped / (step + 1))
    assert 0 < clipped < 16  # the limit sits among the norms this run sees


def test_recipe_settings_enter_the_fingerprint_only_where_they_change_the_numbers(tmp_path):
    base = compose_config("optim.mode=unnormed")
    same = fingerprint(base)
    # defaults and settings that do nothing under the rest: the fingerprint of a run finished before them
    for overrides in (["optim.decay_fraction=0.5"], ["optim.decay_shape=linear"], ["optim.decay_on=matrices"],
                      ["train.grad_accum=4"], ["optim.min_lr_ratio=0.0"]):
        assert fingerprint(compose_config("optim.mode=unnormed", *overrides)) == same, overrides
    for overrides in (["optim.schedule=wsd"], ["optim.min_lr_ratio=0.1"], ["optim.grad_clip=1.0"],
                      ["optim.wd=0.1", "optim.decay_on=matrices"]):
        assert fingerprint(compose_config("optim.mode=unnormed", *overrides)) != same, overrides
    wsd = fingerprint(compose_config("optim.schedule=wsd"))
    assert fingerprint(compose_config("optim.schedule=wsd", "optim.decay_fraction=0.5")) != wsd
    assert fingerprint(compose_config("optim.wd=0.1")) != fingerprint(compose_config("optim.wd=0.1",
                                                                                      "optim.decay_on=matrices"))


@pytest.mark.parametrize("override,message", [
    ("train.grad_accum=3", "train.grad_accum=3 does not divide train.batch_size=32"),
    ("optim.decay_fraction=1.5", "optim.decay_fraction=1.5; must be a number in (0, 1]"),
    ("optim.decay_fraction=0", "optim.decay_fraction=0; must be a number in (0, 1]"),
    ("optim.grad_clip=0", "optim.grad_clip=0; must be a finite number > 0"),
    ("optim.grad_clip=-1.0", "optim.grad_clip=-1.0; must be a finite number > 0"),
    ("optim.min_lr_ratio=1.0", "optim.min_lr_ratio=1.0; must be a number in [0, 1)"),
    ("optim.decay_shape=step", "optim.decay_shape='step'"),
    ("optim.decay_on=biases", "optim.decay_on='biases'"),
])
def test_bad_recipe_values_are_one_line_each(override, message):
    problems = config_problems(compose_config(override))
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_the_recipe_preset_composes_and_validates():
    cfg = compose_config("optim=adamw_wsd_clip", "optim.mode=muon")
    assert config_problems(cfg) == []
    opt = OptimConfig.of(cfg.optim)
    assert (opt.schedule, opt.grad_clip, opt.decay_on, opt.beta2, opt.wd) == ("wsd", 1.0, "matrices", 0.95, 0.1)
