"""Plain helpers the tests share: the real config composed with overrides, tiny run settings, generated data in
the real formats, where the real Shakespeare text is, and spies on the trainer. Fixtures, hooks and the cleaning
of the caller's environment are in conftest.py, which pytest loads first (so the environment is clean before
this module imports torch); tests import these as ``from helpers import ...`` (tests/ is on sys.path, as for
conftest)."""

import json
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


# --- the real Shakespeare text -------------------------------------------------------------------------------------


def shakespeare_candidates() -> list[Path]:
    """Where the real input.txt may be: where a run would read it (data.root's default as the product resolves it,
    ``data_root()``: $MODULA_DATA, else the repository's data/). Nowhere else: a folder beside the clone is not
    the newcomer's, and a test that found its text there would pass here and fail on their machine."""
    from modula_cli.data.storage import data_root

    return [data_root() / "shakespeare" / "input.txt"]


def find_shakespeare() -> Path | None:
    return next((p for p in shakespeare_candidates() if p.is_file()), None)


def require_shakespeare() -> Path:
    """The real Shakespeare input.txt, or a skip whose one line names where it looked; a failure instead where the
    text must be there (CI's second pass sets ``MODULA_DATA_TESTS=required`` and points $MODULA_DATA at it). Tests
    reach it through the ``real_shakespeare`` fixture, which marks them ``real_text`` (conftest.py): that pass
    selects them by the mark."""
    found = find_shakespeare()
    if found is None:
        missing = pytest.fail if os.environ.get("MODULA_DATA_TESTS") == "required" else pytest.skip
        missing("needs Shakespeare's input.txt; looked in " + ", ".join(map(str, shakespeare_candidates())))
    return found


# --- generated data in the real formats ----------------------------------------------------------------------------


def write_cifar_batches(folder: Path, per_batch: int = 16, test_size: int = 24, seed: int = 0) -> None:
    """CIFAR-10 in the official python pickle layout: each class is a template plus noise (learnable),
    and each image's first pixel holds its index (to check sampling)."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(10, 3072))
    target = folder / "cifar10" / "cifar-10-batches-py"
    target.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for b, name in enumerate(names):
        n = test_size if name == "test_batch" else per_batch
        labels = rng.integers(0, 10, n)
        noise = rng.integers(0, 256, size=(n, 3072))
        data = (0.6 * templates[labels] + 0.4 * noise).astype(np.uint8)
        data[:, 0] = np.arange(n) + (0 if name == "test_batch" else b * per_batch)
        entry = {"batch_label": name, "labels": [int(x) for x in labels], "data": data,
                 "filenames": [f"img_{i}.png" for i in range(n)]}
        with open(target / name, "wb") as handle:
            pickle.dump(entry, handle)


# --- the real config, and tiny runs of it --------------------------------------------------------------------------


def compose_config(*overrides: str, with_hydra: bool = False):
    """The real config files, composed with Hydra's compose API; ``with_hydra=True`` keeps the ``hydra`` node (the
    sweeper's grid, the launcher), which compose drops by default."""
    from hydra import compose, initialize_config_dir

    from modula_cli.config import CONFIG_DIR
    from modula_cli.config.resolvers import register_config

    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=with_hydra)


def iterations(cfg) -> int:
    """The training iterations a run of ``cfg`` takes, as the trainer counts them (``variant.iterations``)."""
    from modula_cli.models.variant import iterations as counted, variant_of

    return counted(cfg.train.steps, variant_of(cfg))


TINY_TRAIN = ["train.batch_size=8", "train.eval_batches=2", "train.eval_every=10", "train.log_every=1",
              "train.progress=false", "train.device=cpu", "train.checkpoint_every=0"]


def tiny_gpt(root, *overrides: str) -> list[str]:
    return ["arch=gpt", "arch.width=16", "arch.depth=1", "arch.heads=2", f"data.root={root}", "data.context=16",
            *TINY_TRAIN, *overrides]


def tiny_image(arch: str, root, *overrides: str) -> list[str]:
    sizes = ["arch.width=16", "arch.depth=2"] if arch == "resmlp" else ["arch.width=8", "arch.depth=1",
                                                                        "arch.block_depth=1"]
    return [f"arch={arch}", *sizes, "arch.loss_window=5", "data=cifar10", f"data.root={root}", "data.augment=none",
            *TINY_TRAIN, *overrides]


# --- the trainer's steps and what a run learnt ---------------------------------------------------------------------


def record_first_update(monkeypatch) -> dict:
    """Spies on the trainer's optimiser step: ``initial`` (the weights before the first step), and of the first
    step with a nonzero LR its ``net``, ``grads``, update ``delta`` (stored weights) and ``lr``."""
    import modula_cli.run.loop as run_module

    original, seen = run_module.optimizer_step, {}

    def spy(net, weights, grads, state, cfg_, t, total, **kwargs):
        before = None if "delta" in seen else [w.detach().clone() for w in weights]
        lr = original(net, weights, grads, state, cfg_, t, total, **kwargs)
        if before is not None:
            seen.setdefault("initial", before)
            if float(lr) > 0:
                seen.update(net=net, grads=[g.detach().clone() for g in grads], lr=float(lr),
                            delta=[b - w.detach() for b, w in zip(before, weights)])
        return lr

    monkeypatch.setattr(run_module, "optimizer_step", spy)
    return seen


def paired_drop(cfg, initial: list[torch.Tensor], net, run_dir) -> float:
    """The last 5 logged train losses against the same steps' batches under the initial weights (no batch
    noise in the difference): how much the run has learnt."""
    from omegaconf import OmegaConf

    from modula_cli.data import build_dataset
    from modula_cli.nn.loss import losses_and_hits

    data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "train_loss" in r]
    before = []
    with torch.no_grad():
        for record in records[-5:]:
            x, y = data.train_batch(record["step"], cfg.train.batch_size, cfg.train.seed, device=initial[0].device)
            before.append(float(losses_and_hits(net, initial, x, y)[0][0]))  # the loss the trainer logs
    return sum(before) / 5 - sum(r["train_loss"] for r in records[-5:]) / 5


# --- messages ------------------------------------------------------------------------------------------------------


def exactly(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern for the whole message and nothing else."""
    return "^" + re.escape(message) + "$"


def interrupted_at_step_12(cfg, run_dir, monkeypatch) -> None:
    """Train ``cfg`` into ``run_dir`` until a SIGTERM arrives during step 12 (checkpointed at step 13)."""
    import signal

    import modula_cli.run.loop as loop_module
    import modula_cli.run.trainer as run_module
    from modula_cli.plumbing.signals import StopRequested

    original = loop_module.optimizer_step

    def step_then_sigterm(*args, **kwargs):
        if args[5] == 12:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loop_module, "optimizer_step", step_then_sigterm)
        with pytest.raises(StopRequested):
            run_module.train(cfg, run_dir)


def optim_config(**settings):
    """``OptimConfig`` with its settings written flat, as the tables name them (``mup_base_width=32`` is
    ``optim.mup.base_width``: ``mode_settings.nested_settings``); blocks may be given whole too."""
    from modula_cli.optim.config import OptimConfig
    from modula_cli.optim.mode_settings import nested_settings

    return OptimConfig.of(nested_settings(settings))
