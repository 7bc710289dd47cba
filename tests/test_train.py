"""Single training runs: every optimiser × mode × architecture, hand-checked updates, divergence,
resume, reproducibility, loggers and config errors."""

import json
import re
import math
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch
from hydra.errors import ConfigCompositionException

from helpers import compose_config, iterations, optim_config, paired_drop, record_first_update, tiny_gpt, tiny_image
from modula_cli.nn import Conv2D, Embed, Linear
from modula_cli.optim import ema_weight, init_state, optimizer_step
from modula_cli.run.trainer import train
from modula_cli.plumbing.signals import StopRequested
from modula_cli.config.validate import ConfigError
import prewarmed

# A sensible LR per architecture, optimiser and mode for these tiny models (checked on this data).
NORMED = {"adam": 0.1, "sgd": 0.1}
SENSIBLE_LR = {
    "gpt": {"unnormed": {"adam": 0.01, "sgd": 0.5}, "normed": NORMED, "dualized": NORMED},
    "standard_gpt": {"unnormed": {"adam": 0.003, "sgd": 0.3}, "normed": NORMED, "dualized": NORMED},
    "resmlp": {"unnormed": {"adam": 0.003, "sgd": 0.0001}, "normed": NORMED, "dualized": NORMED},
    # plain SGD: the paper variant (the default) multiplies each 3×3 convolution by sqrt(out/in)/9 in the
    # forward pass, so its steps move a layer 81× less than the same LR in the modular variant
    "resnet": {"unnormed": {"adam": 0.01, "sgd": 4.0}, "normed": {"adam": 0.2, "sgd": 0.2},
               "dualized": {"adam": 0.2, "sgd": 0.2}},
}


# What each case learns (paired_drop, below; measured on the CPU): the mean train loss of the last 5 logged steps
# under the initial weights less under the trained ones, on the same batches. The test asks for half of it.
MEASURED_DROP = {
    "gpt": {"unnormed": {"adam": 2.64, "sgd": 2.57}, "normed": {"adam": 1.98, "sgd": 1.92},
            "dualized": {"adam": 2.30, "sgd": 2.31}},
    "standard_gpt": {"unnormed": {"adam": 1.17, "sgd": 2.01}, "normed": {"adam": 0.51, "sgd": 0.60},
                     "dualized": {"adam": 0.86, "sgd": 0.96}},
    "resmlp": {"unnormed": {"adam": 1.00, "sgd": 0.22}, "normed": {"adam": 0.84, "sgd": 0.64},
               "dualized": {"adam": 0.88, "sgd": 1.15}},
    # 1 block of width 8 fits the 80 training images only a little in 30 steps (and its test loss not at all)
    "resnet": {"unnormed": {"adam": 0.069, "sgd": 0.055}, "normed": {"adam": 0.074, "sgd": 0.074},
               "dualized": {"adam": 0.093, "sgd": 0.074}},
}


def matrix_slices(atom, weight: torch.Tensor) -> torch.Tensor:
    """A matrix atom's weight as (slices, d_out, d_in): a convolution's (c_out, c_in, k, k) as its k² slices."""
    if isinstance(atom, Conv2D):
        k = weight.shape[-1]
        return weight.permute(2, 3, 0, 1).reshape(k * k, *weight.shape[:2])
    assert isinstance(atom, Linear), atom
    return weight.unsqueeze(0)


def exact_atom_norm(atom, delta: torch.Tensor) -> float:
    """The atom norm of an (effective) weight change, from its singular values (docs/design.md, "Atoms"): a
    matrix's sqrt(d_in/d_out)·σ_max, a convolution's k² times its largest slice's, an embedding's largest row RMS."""
    delta = delta.detach().float()
    if isinstance(atom, Embed):
        return float(delta.pow(2).mean(dim=-1).sqrt().max())
    slices = matrix_slices(atom, delta)
    return len(slices) * math.sqrt(atom.d_in / atom.d_out) * float(torch.linalg.svdvals(slices).max())


def assert_first_update_size(seen: dict, mode: str, optimizer: str, dualized_tol: float = 1e-3) -> None:
    """The first update, against what its mode promises: unnormed, Adam's first step is lr·sign(g) (eps = 0:
    m/√v = g/|g|) and SGD's lr·g (the momentum starts at g); normed and dualized, each atom's change in its
    own norm is lr × its share of the modular norm (the net's target shares), so the modular norm of the
    whole update is lr. Normed mode estimates σ_max by power iteration, which only underestimates it: each
    atom's change is at least its share (measured up to 3.1× on these nets at the first step), along the
    optimiser's direction (per slice: the paper variant scales a convolution's slices one by one)."""
    net, delta, lr = seen["net"], seen["delta"], seen["lr"]
    atoms, shares = list(net.atoms()), net.target_shares()
    if mode == "unnormed":
        for atom, d, g, w in zip(atoms, delta, seen["grads"], seen["initial"]):
            if not isinstance(atom, Embed):  # the paper variant puts embedding rows back on their sphere
                expected = lr * (torch.sign(g) if optimizer == "adam" else g)
                rounding = 4 * torch.finfo(w.dtype).eps * float(w.abs().max())  # Δ is a difference of weights
                assert torch.allclose(d, expected, rtol=1e-4, atol=rounding), type(atom).__name__
        return
    ratios = [exact_atom_norm(atom, atom.effective(d)) / (lr * share) for atom, d, share in zip(atoms, delta, shares)]
    # the modular norm of the update is each atom's norm over its share, at its largest
    assert net.norm(delta) == pytest.approx(lr * max(ratios), rel=1e-4)
    for atom, ratio, d, g in zip(atoms, ratios, delta, seen["grads"]):
        # embeddings are rescaled row by row (exact in both modes), up to the paper variant's renormalisation
        if isinstance(atom, Embed) or mode == "dualized":
            assert ratio == pytest.approx(1.0, abs=2e-3 if isinstance(atom, Embed) else dualized_tol), ratios
        else:
            assert 1 - 1e-4 <= ratio <= 4.0, ratios
            u = torch.sign(g) if optimizer == "adam" else g
            cosines = torch.nn.functional.cosine_similarity(matrix_slices(atom, d).flatten(1),
                                                            matrix_slices(atom, u).flatten(1), dim=1)
            assert cosines.min() > 1 - 1e-4, cosines


@pytest.mark.parametrize("mode", ["unnormed", "normed", "dualized"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("arch", ["gpt", "standard_gpt", "resmlp", "resnet"])
def test_every_optimizer_mode_and_architecture_learns(arch, optimizer, mode, tmp_path, tiny_text_root, cifar_root,
                                                      monkeypatch):
    lr = SENSIBLE_LR[arch][mode][optimizer]
    common = [f"optim={optimizer}", f"optim.mode={mode}", f"optim.lr={lr}", "train.steps=30",
              "optim.schedule=constant"]
    if arch in ("gpt", "standard_gpt"):
        cfg = compose_config(*tiny_gpt(tiny_text_root, f"arch={arch}", *common))
    else:
        cfg = compose_config(*tiny_image(arch, cifar_root, *common))
    seen = record_first_update(monkeypatch)
    summary = train(cfg, tmp_path / "run").summary
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train_loss"] for r in records if "train_loss" in r]
    assert summary["status"] == "completed" and summary["steps_done"] == iterations(cfg)
    assert all(math.isfinite(x) for x in losses)
    assert seen["lr"] == pytest.approx(lr)  # constant schedule: the first step takes the whole LR
    assert_first_update_size(seen, mode, optimizer)
    drop = paired_drop(cfg, seen["initial"], seen["net"], tmp_path / "run")
    assert drop >= MEASURED_DROP[arch][mode][optimizer] / 2, drop
    assert math.isfinite(summary["test_loss"])
    if arch in ("resmlp", "resnet"):
        assert 0.0 <= summary["test_acc"] <= 1.0


def one_linear_step(mode, optimizer, grads, lr=0.5):
    net = Linear(4, 3)
    weights = [torch.zeros(4, 3)]
    cfg = optim_config(name=optimizer, mode=mode, lr=lr, schedule="constant", ortho="svd")
    state = init_state(weights, cfg)
    for t, g in enumerate(grads):
        before = weights[0].clone()
        optimizer_step(net, weights, [g], state, cfg, t, total_steps=10)
    return before - weights[0]


def test_linear_updates_by_hand():
    torch.manual_seed(0)
    g1, g2 = torch.randn(4, 3), torch.randn(4, 3)
    # SGD: m₀ = g₁; m₁ = m₀ + c₁ (g₂ − m₀) with c₁ = 0.1^(1/2)
    c1 = 0.1 ** 0.5
    momentum = g1 + c1 * (g2 - g1)
    assert ema_weight(0.9, 1) == pytest.approx(c1)
    assert torch.allclose(one_linear_step("unnormed", "sgd", [g1, g2]), 0.5 * momentum, atol=1e-6)
    # normed: Δ = lr · u / ||u||, ||u|| = sqrt(d_in/d_out) · σ_max(u)
    expected = 0.5 * momentum / (math.sqrt(3 / 4) * torch.linalg.matrix_norm(momentum, ord=2))
    assert torch.allclose(one_linear_step("normed", "sgd", [g1, g2]), expected, atol=1e-5)
    # dualized: Δ = lr · sqrt(d_out/d_in) · U Vᵀ of the momentum
    U, _, Vh = torch.linalg.svd(momentum, full_matrices=False)
    assert torch.allclose(one_linear_step("dualized", "sgd", [g1, g2]), 0.5 * math.sqrt(4 / 3) * U @ Vh, atol=1e-5)
    # Adam's first step copies g and g²: u = g / |g| = sign(g)
    assert torch.allclose(one_linear_step("unnormed", "adam", [g1]), 0.5 * torch.sign(g1))
    U, S, Vh = torch.linalg.svd(torch.sign(g1), full_matrices=False)
    rank = int((S > 1e-5).sum())  # this sign matrix is rank-deficient: the polar factor spans its range only
    polar = U[:, :rank] @ Vh[:rank]
    assert torch.allclose(one_linear_step("dualized", "adam", [g1]), 0.5 * math.sqrt(4 / 3) * polar, atol=1e-5)
    # zero gradient entries: 0/0 → 0, never NaN
    g = g1.clone()
    g[0, 0] = 0.0
    assert one_linear_step("unnormed", "adam", [g])[0, 0] == 0.0


def test_an_eager_step_imports_no_compiler():
    """torch._dynamo costs 3 s of CPU to import: an eager step of each of the paper's modes takes none of it (the
    normed mode's graph break imported it at the first step of every run's process). A fresh interpreter."""
    code = ("import sys, torch\nfrom modula_cli.nn import ResMLP\n"
            "from modula_cli.optim import OptimConfig, init_state, optimizer_step\n"
            "net = ResMLP(width=8, depth=2, block_depth=2, input_dim=12, output_dim=3)\n"
            "for mode in ('unnormed', 'normed', 'dualized', 'manifold'):\n"
            "    cfg, weights = OptimConfig(name='adam', mode=mode, lr=0.1), net.initialize(0)\n"
            "    optimizer_step(net, weights, [torch.ones_like(w) for w in weights], init_state(weights, cfg), cfg,"
            " 0, 2)\n"
            "    print(mode, 'torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["unnormed", "False", "normed", "False", "dualized", "False", "manifold", "False"]


def test_huge_lr_diverges_and_run_ends_cleanly(tmp_path, tiny_text_root):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "optim.mode=unnormed", "optim.lr=1000", "train.steps=50"))
    summary = train(cfg, tmp_path / "run").summary
    assert summary["status"] == "diverged" and summary["steps_done"] < 50
    assert summary["train_loss"] is None
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "diverged"


def read_losses(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("train_loss"), r.get("test_loss") if "test_acc" not in r else
             (r["test_loss"], r["test_acc"])) for r in records]


def test_same_seed_reproduces_and_finished_run_is_skipped(tmp_path, tiny_text_root):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=12"))
    first, second = train(cfg, tmp_path / "a").summary, train(cfg, tmp_path / "b").summary
    assert read_losses(tmp_path / "a") == read_losses(tmp_path / "b")
    assert first["train_loss"] == second["train_loss"]
    # a finished run folder holds its results alone: its lock and owner files went when it finished
    assert not {"run.lock", "run.owner"} & {p.name for p in (tmp_path / "a").iterdir()}
    again = train(cfg, tmp_path / "a").summary
    assert again.get("skipped") is True
    rerun = train(compose_config(*tiny_gpt(tiny_text_root, "train.steps=12", "train.rerun=true")),
                  tmp_path / "a").summary
    assert not rerun.get("skipped") and rerun["train_loss"] == first["train_loss"]


def interrupted_at(monkeypatch, step: int, run) -> None:
    """``run()`` with a SIGTERM sent during optimiser step ``step``: it must stop (after that step)."""
    import modula_cli.run.loop as run_module

    original = run_module.optimizer_step

    def step_then_sigterm(net, weights, grads, state, cfg_, t, total, **kwargs):
        if t == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(net, weights, grads, state, cfg_, t, total, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(run_module, "optimizer_step", step_then_sigterm)
        with pytest.raises(StopRequested):
            run()


@pytest.mark.parametrize("mode", ["normed", "dualized", "manifold"])
def test_preemption_checkpoints_and_resume_is_exact(mode, tmp_path, tiny_text_root, monkeypatch):
    overrides = tiny_gpt(tiny_text_root, f"optim.mode={mode}", "train.steps=30", "train.checkpoint_every=7",
                         "train.eval_every=5")
    cfg = compose_config(*overrides)
    reference = train(cfg, tmp_path / "reference").summary
    # the signal arrives during step 17; the loop checkpoints before step 18
    interrupted_at(monkeypatch, 17, lambda: train(cfg, tmp_path / "resumed"))
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["state"]["step"] == 18
    assert json.loads((tmp_path / "resumed" / "summary.json").read_text())["status"] == "interrupted"
    assert (tmp_path / "resumed" / "run.lock").exists()  # an unfinished run keeps its lock file for the resume
    resumed = train(cfg, tmp_path / "resumed").summary
    assert read_losses(tmp_path / "resumed") == read_losses(tmp_path / "reference")
    assert resumed["train_loss"] == reference["train_loss"] and resumed["test_loss"] == reference["test_loss"]
    assert not (tmp_path / "resumed" / "checkpoint.pt").exists()
    # the summary says which dtype the orthogonalisation ran in (optim.ortho.dtype=auto: float32 on a CPU)
    assert resumed.get("ortho_dtype") == ("float32" if mode == "dualized" else None)


@pytest.mark.parametrize("override, message", [
    ("optim.lr=-1", "optim.lr=-1"),
    ("optim.lr=0", "optim.lr=0"),
    ("arch.heads=3", "arch.width=16 is not divisible by arch.heads=3"),
    ("train.steps=0", "train.steps=0"),
    ("optim.mode=sharp", "allowed: unnormed, normed, dualized"),
    ("optim.schedule=step", "allowed: linear, cosine, constant, wsd"),
    ("train.dtype=float16", "allowed: float32, bfloat16"),
    ("optim.ortho.method=qr", "allowed: polar_express, muon, cubic, svd"),
    ("optim.ortho.dtype=fp16", "optim.ortho.dtype=.fp16.; allowed: auto, float32, bfloat16"),
    ("optim.lr=[0.1,0.2,1e-1]", "must not repeat a learning rate"),
    ("arch.blocks_mass=inf", r"arch.blocks_mass=inf; must be a finite number > 0"),
    ("arch.blocks_mass=0", r"arch.blocks_mass=0; must be a finite number > 0"),
])
def test_config_errors_before_training(override, message, tmp_path, tiny_text_root):
    cfg = compose_config(*tiny_gpt(tiny_text_root, override))
    with pytest.raises(ConfigError, match=message):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_architecture_and_dataset_must_match(tmp_path, tiny_text_root):
    cfg = compose_config("arch=resmlp", f"data.root={tiny_text_root}", "train.device=cpu")
    with pytest.raises(ConfigError, match="arch=resmlp needs an image dataset"):
        train(cfg, tmp_path / "run")


def test_several_errors_reported_at_once(tmp_path, tiny_text_root):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "optim.lr=-1", "train.steps=0"))
    with pytest.raises(ConfigError) as error:
        train(cfg, tmp_path / "run")
    assert len(error.value.problems) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised where no GPU is visible")
def test_cuda_without_gpu_is_a_config_error(tmp_path, tiny_text_root):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.device=cuda"))
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        train(cfg, tmp_path / "run")


@pytest.mark.parametrize("override, message", [("arch=transformer", "Available options"),
                                                ("train.stepz=5", "stepz")])
def test_unknown_group_option_or_key(override, message):
    with pytest.raises(ConfigCompositionException, match=message):
        compose_config(override)


def test_wandb_offline_and_wandb_failure_never_stop_training(tmp_path, tiny_text_root, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = compose_config(*tiny_gpt(tiny_text_root, "logger=wandb", "logger.mode=offline", "train.steps=3"))
    assert train(cfg, tmp_path / "offline").status == "completed"
    assert any((tmp_path / "offline" / "wandb").iterdir())

    import wandb

    def broken(*args, **kwargs):
        raise RuntimeError("wandb is down")

    monkeypatch.setattr(wandb, "init", broken)
    assert train(cfg, tmp_path / "broken").status == "completed"


def run_cli(args, cwd, env_extra=None):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    return prewarmed.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_diverged_exits_zero_and_bad_config_exits_nonzero(tmp_path, tiny_text_root):
    cli = [sys.executable, "-m", "modula_cli.train"]
    ok = run_cli(cli + tiny_gpt(tiny_text_root, "optim.mode=unnormed", "optim.lr=1000", "train.steps=40",
                                f"hydra.run.dir={tmp_path / 'div'}"), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "div" / "summary.json").read_text())["status"] == "diverged"
    assert (tmp_path / "div" / "config.yaml").exists()
    bad = run_cli(cli + tiny_gpt(tiny_text_root, "optim.lr=-1", f"hydra.run.dir={tmp_path / 'bad'}"), tmp_path)
    assert bad.returncode != 0 and "optim.lr=-1" in bad.stderr


def loopback_works() -> bool:
    """A TCP connection to 127.0.0.1 opens: torch.distributed's rendezvous and gloo need one (a network namespace
    made by ``unshare -n`` has its loopback down, and torchrun would wait there until its timeout)."""
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            socket.create_connection(server.getsockname(), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("lr, member", [("0.25", ""), ("[0.05,0.2]", "lr=0.2")])
def test_torchrun_two_cpu_processes_match_one(lr, member, tmp_path, tiny_text_root):
    if not loopback_works():
        pytest.skip("no loopback network (127.0.0.1 unreachable): torchrun's processes meet over TCP")
    args = tiny_gpt(tiny_text_root, "train.steps=8", f"optim.lr={lr}")
    single = run_cli([sys.executable, "-m", "modula_cli.train", *args, f"hydra.run.dir={tmp_path / 'one'}"], tmp_path)
    assert single.returncode == 0, single.stderr
    with socket.socket() as probe:  # a free port: the two cases may run at once on two test workers
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ddp = run_cli([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                   "-m", "modula_cli.train", *args, f"hydra.run.dir={tmp_path / 'two'}"], tmp_path,
                  {"OMP_NUM_THREADS": "1"})
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    one, two = read_losses(tmp_path / "one" / member), read_losses(tmp_path / "two" / member)
    assert [s for s, *_ in one] == [s for s, *_ in two]
    for (_, a, at), (_, b, bt) in zip(one, two):
        assert (a is None) == (b is None) and (a is None or abs(a - b) < 1e-4)
        assert (at is None) == (bt is None) and (at is None or abs(at - bt) < 1e-4)
    assert json.loads((tmp_path / "two" / member / "summary.json").read_text())["world_size"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("lr, member_dirs", [("0.25", [""]),
                                             ("[0.05,0.2]", ["lr=0.05", "lr=0.2"])])
def test_torch_compile_matches_eager(lr, member_dirs, tmp_path, tiny_text_root):
    """Compiled loss-and-gradient step and optimiser update, for a single run and a packed one."""
    for name, extra in (("eager", []), ("compiled", ["train.compile=true"])):
        train(compose_config(*tiny_gpt(tiny_text_root, "train.steps=6", f"optim.lr={lr}", *extra)), tmp_path / name)
    for member in member_dirs:
        assert_same_losses(tmp_path / "eager" / member, tmp_path / "compiled" / member, tol=1e-4)


def assert_same_losses(a_dir, b_dir, tol=2e-4):
    """Both runs logged the same steps, each with a train loss on both sides or on neither (likewise the test
    loss and accuracy), equal within ``tol``; and each logged train losses at all (two runs that log none
    are not the same run)."""
    a, b = read_losses(a_dir), read_losses(b_dir)
    assert [s for s, *_ in a] == [s for s, *_ in b]
    for losses, where in ((a, a_dir), (b, b_dir)):
        assert any(x is not None for _, x, _ in losses), f"{where} logged no train loss"
    for (step, x, xt), (_, y, yt) in zip(a, b):
        assert (x is None) == (y is None) and (x is None or abs(x - y) < tol), (step, x, y)
        assert (xt is None) == (yt is None), (step, xt, yt)
        assert xt is None or (pytest.approx(xt, abs=tol) == yt), (step, xt, yt)  # test loss (and accuracy)


@pytest.mark.parametrize("arch, mode, lrs", [
    ("gpt", "unnormed", (0.003, 0.01)), ("gpt", "normed", (0.05, 0.2)), ("gpt", "dualized", (0.05, 0.2)),
    ("resmlp", "normed", (0.05, 0.2)), ("resnet", "dualized", (0.1, 0.2)),
])
def test_packed_run_matches_separate_runs(arch, mode, lrs, tmp_path, tiny_text_root, cifar_root):
    def config(*extra):
        common = [f"optim.mode={mode}", "train.steps=10", *extra]
        return compose_config(*(tiny_gpt(tiny_text_root, *common) if arch == "gpt"
                                else tiny_image(arch, cifar_root, *common)))

    result = train(config(f"optim.lr=[{lrs[0]},{lrs[1]}]"), tmp_path / "pack")
    assert result.packed and [m["lr"] for m in result.members] == list(lrs)
    for lr, member in zip(lrs, result.members):
        separate = train(config(f"optim.lr={lr}"), tmp_path / f"separate_{lr}").summary
        member_dir = tmp_path / "pack" / f"lr={lr!r}"
        assert (member_dir / "config.yaml").exists() and (member_dir / "summary.json").exists()
        assert_same_losses(member_dir, tmp_path / f"separate_{lr}")
        assert member["train_loss"] == pytest.approx(separate["train_loss"], abs=2e-4)
        assert member["fingerprint"] == separate["fingerprint"]  # a packed run counts as the separate run


@pytest.mark.parametrize("arch, mode", [("gpt", "normed"), ("resmlp", "dualized")])
def test_packed_lrs_and_seeds_match_separate_runs(arch, mode, tmp_path, tiny_text_root, cifar_root):
    """Members = LR × seed: each on its own seed's initialisation and batches, as its separate run."""
    def config(*extra):
        common = [f"optim.mode={mode}", "train.steps=8", *extra]
        return compose_config(*(tiny_gpt(tiny_text_root, *common) if arch == "gpt"
                                else tiny_image(arch, cifar_root, *common)))

    result = train(config("optim.lr=[0.05,0.2]", "train.seed=[3,7]"), tmp_path / "pack")
    members = result.members
    assert [(m["lr"], m["seed"]) for m in members] == [(0.05, 3), (0.05, 7), (0.2, 3), (0.2, 7)]
    for member in members:
        name = f"lr={member['lr']!r},seed={member['seed']}"
        separate = train(config(f"optim.lr={member['lr']}", f"train.seed={member['seed']}"), tmp_path / name).summary
        assert_same_losses(tmp_path / "pack" / name, tmp_path / name)
        assert member["fingerprint"] == separate["fingerprint"]
        assert member["overrides"][-2:] == [f"optim.lr={member['lr']!r}", f"train.seed={member['seed']}"]
    # different seeds really are different runs
    assert members[0]["train_loss"] != pytest.approx(members[1]["train_loss"], abs=1e-4)


def test_packed_seeds_at_the_default_lr_are_the_separate_runs(tmp_path, tiny_text_root):
    result = train(compose_config(*tiny_gpt(tiny_text_root, "train.steps=5", "train.seed=[0,1]")), tmp_path / "pack")
    assert [m["seed"] for m in result.members] == [0, 1]
    assert sorted(p.name for p in (tmp_path / "pack").iterdir() if p.is_dir()) == ["seed=0", "seed=1"]
    separate = train(compose_config(*tiny_gpt(tiny_text_root, "train.steps=5", "train.seed=1")),
                     tmp_path / "one").summary
    assert separate["fingerprint"] == result.members[1]["fingerprint"]  # optim.lr stays unset in both


@pytest.mark.parametrize("seed, problem", [("[0,0]", "must not repeat a seed"), ("-1", "integer >= 0"),
                                           ("[1,x]", "integer >= 0")])
def test_bad_seeds_are_rejected(seed, problem, tmp_path, tiny_text_root):
    with pytest.raises(ConfigError, match=problem):
        train(compose_config(*tiny_gpt(tiny_text_root, f"train.seed={seed}")), tmp_path / "run")


def test_packed_diverging_member_is_frozen_and_the_others_go_on(tmp_path, tiny_text_root):
    common = ["optim.mode=unnormed", "train.steps=30"]
    cfg = compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=[0.01,1000.0]"))
    result = train(cfg, tmp_path / "pack")
    good, bad = result.members
    assert bad["status"] == "diverged" and bad["steps_done"] < 30 and bad["train_loss"] is None
    assert good["status"] == "completed" and good["steps_done"] == iterations(cfg)
    train(compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=0.01")), tmp_path / "separate")
    assert_same_losses(tmp_path / "pack" / "lr=0.01", tmp_path / "separate")
    # relaunching the finished pack skips it
    again = train(compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=[0.01,1000.0]")), tmp_path / "pack")
    assert all(m.get("skipped") for m in again.members)


def test_the_variant_note_of_an_architecture_is_logged_once_per_process(tmp_path, tiny_text_root, caplog):
    import modula_cli.run.context as context

    context.say_once.cache_clear()  # earlier tests in this process may have logged it
    caplog.set_level("INFO")
    for lr in (0.01, 0.02):  # two runs of a sweep in one process
        train(compose_config(*tiny_gpt(tiny_text_root, "arch=standard_gpt", "arch.width=16", "train.steps=2",
                                       f"optim.lr={lr}")), tmp_path / f"lr{lr}")
    notes = [r.message for r in caplog.records if "only the training loop" in r.message]
    assert len(notes) == 1


def test_metrics_are_on_disk_at_every_logged_step(tmp_path):
    from modula_cli.run.loggers import JsonlLogger

    logger = JsonlLogger(tmp_path / "metrics.jsonl")
    logger.log({"step": 0, "train_loss": 4.2})
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 0, "train_loss": 4.2}  # still open
    logger.close()


def test_a_run_without_a_progress_bar_says_where_it_stands(tmp_path, tiny_text_root, caplog, monkeypatch):
    import modula_cli.run.loggers as loggers

    monkeypatch.setattr(loggers, "HEARTBEAT_S", 0.0)
    caplog.set_level("INFO")
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=4", "train.log_every=2", "train.progress=false",
                                   "optim.lr=[0.01,0.02]"))
    train(cfg, tmp_path / "pack")
    total = iterations(cfg)  # the paper variant's extra step included
    beats = [r.message for r in caplog.records if f" of {total}, best lr " in r.message]
    assert [b.split(": step ")[1].split(",")[0] for b in beats] == [f"{s} of {total}" for s in (1, 3, total)]
    # a packed run is named by what its members share and span; its loss is its best LR's at that step
    assert all(b.startswith("2 packed runs, lr 0.01…0.02: step ") for b in beats), beats
    for beat in beats:
        lr, loss = re.search(r"best lr (0\.0[12]): train loss (\d+\.\d+),", beat).groups()
        step = int(beat.split(": step ")[1].split(" ")[0])
        at = {other: next(json.loads(line)["train_loss"] for line in (tmp_path / "pack" / f"lr={other}")
                          .joinpath("metrics.jsonl").read_text().splitlines()
                          if json.loads(line)["step"] == step - 1 and "train_loss" in json.loads(line))
              for other in ("0.01", "0.02")}
        assert float(loss) == pytest.approx(at[lr], abs=1e-4) and at[lr] == min(at.values())
    # the remaining steps at the run's pace so far: none left at the last step
    assert all(re.search(r", about \d+m\d\ds left in this run$", b) for b in beats), beats
    assert beats[-1].endswith("about 0m00s left in this run")


def test_durations_read_as_minutes_and_seconds_then_hours_and_minutes():
    from modula_cli.plumbing.wording import duration_text

    assert [duration_text(s) for s in (0, 59.9, 61, 3599, 3600, 7500)] == \
        ["0m00s", "0m59s", "1m01s", "59m59s", "1h00m", "2h05m"]


def test_a_single_run_out_of_memory_is_one_line_naming_the_sizes(tmp_path, tiny_text_root, monkeypatch):
    """A run too large for the machine (a 100k context, say) ends in one line naming the sizes to shrink, not
    a traceback; any other error is left as it is."""
    import modula_cli.run.trainer as run_module
    from modula_cli.train import run_or_exit

    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=2"))
    message = "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: you tried to"
    monkeypatch.setattr(run_module, "train", lambda *a, **k: (_ for _ in ()).throw(RuntimeError(message)))
    with pytest.raises(SystemExit) as stopped:
        run_or_exit(cfg, tmp_path / "run")
    said = str(stopped.value.code)
    assert said.startswith(f"modula-sweep: out of memory ({message}); arch.width=16, train.batch_size=8, "
                           "data.context=16: smaller ones need less") and "\n" not in said
    monkeypatch.setattr(run_module, "train", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("shapes differ")))
    with pytest.raises(RuntimeError, match="shapes differ"):
        run_or_exit(cfg, tmp_path / "run")
