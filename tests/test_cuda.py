"""Training on a GPU: the CUDA paths the CPU suite cannot reach (skipped without a GPU).

GPU kernels are not bit-reproducible (atomics in the embedding backward, other reduction orders in bmm than
in mm), so comparisons here use tolerances where the CPU tests demand equality.
"""

import json
import math
import os
import signal

import pytest
import torch
from conftest import compose_config, tiny_gpt
from test_train import assert_same_losses, read_losses

from modula_cli.run.trainer import train
from modula_cli.plumbing.signals import StopRequested

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def on_cuda(root, *overrides: str):
    return compose_config(*tiny_gpt(root, *overrides, "train.device=cuda"))


@pytest.mark.parametrize("mode", ["normed", "dualized", "manifold"])
def test_tiny_gpt_learns_on_cuda_in_bfloat16_compiled(mode, tmp_path, tiny_text_root):
    extra = [] if mode == "manifold" else ["train.compile=true"]  # manifold's dual ascent is not compiled
    summary = train(on_cuda(tiny_text_root, f"optim.mode={mode}", "train.steps=30", "train.dtype=bfloat16",
                            *extra), tmp_path / "run").summary
    losses = [loss for _, loss, _ in read_losses(tmp_path / "run") if loss is not None]
    assert summary["status"] == "completed" and all(math.isfinite(x) for x in losses)
    assert summary.get("ortho_dtype") == ("bfloat16" if mode == "dualized" else None)  # optim.ortho_dtype=auto
    assert sum(losses[-5:]) / 5 < losses[0] - 0.04, losses


def test_packed_run_matches_separate_runs_on_cuda(tmp_path, tiny_text_root):
    lrs = (0.05, 0.2)
    result = train(on_cuda(tiny_text_root, "optim.mode=dualized", "train.steps=10", f"optim.lr=[{lrs[0]},{lrs[1]}]"),
                   tmp_path / "pack")
    assert result.packed
    for lr in lrs:
        train(on_cuda(tiny_text_root, "optim.mode=dualized", "train.steps=10", f"optim.lr={lr}"), tmp_path / str(lr))
        assert_same_losses(tmp_path / "pack" / f"lr={lr!r}", tmp_path / str(lr), tol=2e-3)


def test_sigterm_on_cuda_resumes_on_cuda_and_on_cpu(tmp_path, tiny_text_root, monkeypatch):
    """A run stopped on the GPU resumes from its checkpoint, on the GPU or (train.device is not part of a
    run's identity) on the CPU, and ends where the uninterrupted run ends."""
    import modula_cli.run.trainer as run_module

    common = ["optim.mode=normed", "train.steps=20", "train.checkpoint_every=5"]
    train(on_cuda(tiny_text_root, *common), tmp_path / "reference")
    original = run_module.optimizer_step

    def step_then_sigterm(net, weights, grads, state, cfg_, t, total, **kwargs):
        if t == 12:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(net, weights, grads, state, cfg_, t, total, **kwargs)

    for name, device in (("gpu", "cuda"), ("cpu", "cpu")):
        monkeypatch.setattr(run_module, "optimizer_step", step_then_sigterm)
        with pytest.raises(StopRequested):
            train(on_cuda(tiny_text_root, *common), tmp_path / name)
        assert json.loads((tmp_path / name / "summary.json").read_text())["status"] == "interrupted"
        monkeypatch.setattr(run_module, "optimizer_step", original)
        resumed = train(compose_config(*tiny_gpt(tiny_text_root, *common, f"train.device={device}")),
                        tmp_path / name).summary
        assert resumed["status"] == "completed"
        assert_same_losses(tmp_path / name, tmp_path / "reference", tol=2e-3)
