"""Divergence is noticed at every step, whatever ``train.log_every`` is (docs/design.md, "The optimisation loop")."""

import json
import math

import pytest

import modula_cli.run.loop as trainer
from helpers import compose_config, tiny_gpt
from modula_cli.run.trainer import train


@pytest.fixture
def counted_steps(monkeypatch):
    """How many optimiser steps the run took."""
    calls = []
    real = trainer.optimizer_step

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(trainer, "optimizer_step", counting)
    return calls


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _diverging_run(root, *overrides):
    return compose_config(*tiny_gpt(root, "optim.mode=unnormed", "optim.lr=1000", "train.steps=200", *overrides))


def test_a_diverged_run_stops_at_the_same_step_whatever_log_every_is(tmp_path, tiny_text_root, counted_steps):
    every_step = train(_diverging_run(tiny_text_root, "train.log_every=1"), tmp_path / "every").summary
    taken_when_logging_every_step = len(counted_steps)
    counted_steps.clear()
    rare = train(_diverging_run(tiny_text_root, "train.log_every=1000"), tmp_path / "rare").summary

    assert every_step["status"] == rare["status"] == "diverged"
    stopped = every_step["steps_done"]
    assert stopped < 10 and rare["steps_done"] == stopped
    # read one step late between logs: at most one step more than when every step is logged
    assert taken_when_logging_every_step == stopped and len(counted_steps) <= stopped + 1
    # the step that diverged is in the log, with the loss that gave it away
    last = [r for r in _records(tmp_path / "rare") if "train_loss" in r][-1]
    assert last["step"] == stopped - 1
    first = _records(tmp_path / "rare")[0]["train_loss"]
    assert not math.isfinite(last["train_loss"]) or last["train_loss"] > 3 * first
    assert rare["last_logged_train_loss"] == pytest.approx(last["train_loss"], nan_ok=True)


def test_a_packed_member_is_frozen_between_logs_and_the_others_are_untouched(tmp_path, tiny_text_root):
    common = ["optim.mode=unnormed", "train.steps=30", "train.log_every=1000"]
    result = train(compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=[0.01,1000.0]")), tmp_path / "pack")
    every = train(compose_config(*tiny_gpt(tiny_text_root, "optim.mode=unnormed", "train.steps=30",
                                           "train.log_every=1", "optim.lr=1000.0")), tmp_path / "alone").summary
    good, bad = result.members
    assert bad["status"] == "diverged" and bad["steps_done"] == every["steps_done"] < 10
    separate = train(compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=0.01")), tmp_path / "separate")
    assert good["status"] == "completed"
    for key in ("train_loss", "test_loss"):  # packed and alone differ only by float summation order
        assert good[key] == pytest.approx(separate.summary[key], rel=1e-5)
