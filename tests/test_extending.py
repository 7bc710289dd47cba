"""A user's own architecture by import path (the worked example of docs/extending.md, run from a folder
outside the package), its one-line errors, and the batch / horizon / weight-decay axes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from helpers import compose_config, tiny_gpt, write_cifar_batches
from modula_cli.models import ModelError, build_model
from modula_cli.nn import Linear
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.config.identity import RunIdentity
from modula_cli.config.validate import config_problems
import prewarmed

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_mlp"
BIN = Path(sys.executable).parent  # the console scripts a user runs, installed beside this Python


def _run(tool: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return prewarmed.run([str(BIN / tool), *args], cwd=folder, capture_output=True, text=True, timeout=300)


def test_worked_example_sweeps_and_coordinate_checks_from_its_own_folder(tmp_path):
    """The commands of docs/extending.md, from a copy of examples/my_mlp (not importable from anywhere else)."""
    folder = tmp_path / "my_mlp"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    write_cifar_batches(tmp_path / "data")
    data = ["data=cifar10", f"data.root={tmp_path / 'data'}", "data.augment=none", "train.device=cpu"]
    sweep = _run("modula-sweep", folder, "--config-dir", "configs", "arch=my_mlp", *data, "sweep=width",
                 "arch.width=16,32", "optim.lr=0.0625,0.25", "train.steps=10", "train.eval_every=0",
                 "train.eval_batches=1", "train.batch_size=8")
    assert sweep.returncode == 0, sweep.stderr
    # ':' kept out of folder names; the default variant, paper, named at the end
    sweep_dir = folder / "outputs" / "sweeps" / "width" / "my_models-my_mlp_cifar10_paper"
    transfer = pd.read_csv(sweep_dir / "transfer.csv")
    assert transfer[["arch", "scale_knob", "smallest", "largest"]].values.tolist() == [
        ["my_models:my_mlp", "width", 16, 32]]
    assert len(pd.read_csv(sweep_dir / "results.csv")) == 4
    check = _run("modula-coord-check", folder, "--config-dir", "configs", "arch=my_mlp", *data,
                 "coord.widths=[16,32,64]", "coord.modes=[normed,unnormed]", "hydra.run.dir=coord")
    assert check.returncode == 0, check.stderr
    table = pd.read_csv(folder / "coord" / "coord.csv")
    assert table["layer"].unique().tolist() == ["input", "hidden[0]", "hidden[1]", "output"]
    # The verdicts, against slopes recomputed from coord.csv: log(value) on log(width) at the last step.
    last = table[table["step"] == table["step"].max()]
    slope = {(mode, layer, q): np.polyfit(np.log(group["width"]), np.log(group[q]), 1)[0]
             for (mode, layer), group in last.sort_values("width").groupby(["mode", "layer"])
             for q in ("delta_rms", "own_delta_rms")}
    verdict = dict(line.split(": ", 1) for line in (folder / "coord" / "verdict.txt").read_text().splitlines())
    for mode, text in verdict.items():
        if mode != "warning":
            assert f"  {mode:<8}  {text}" in check.stdout  # printed as saved
    # normed Adam: every layer's change flat in width (measured: largest slope +0.17)
    assert max(abs(v) for (mode, *_), v in slope.items() if mode == "normed") <= 0.3
    assert verdict["normed"].startswith("width-stable (tentative: widths span only 4×): ")
    # unnormed Adam: each step moves every weight by ±LR, so a layer's own change grows ∝ its fan-in (the
    # hidden layers' and output's: width); the verdict names every layer beyond ±0.3, worst first, with its
    # worst quantity (measured: hidden[1] +1.54, hidden[0] +1.26, output +1.22, input delta_rms +0.47)
    assert all(slope[("unnormed", layer, "own_delta_rms")] >= 0.8 for layer in ("hidden[0]", "hidden[1]", "output"))
    worst = {}
    for (mode, layer, q), v in slope.items():
        if mode == "unnormed" and abs(v) > abs(worst.get(layer, (None, 0.0))[1]):
            worst[layer] = (q, v)
    named = sorted(((layer, q, v) for layer, (q, v) in worst.items() if abs(v) > 0.3), key=lambda x: -abs(x[2]))
    assert verdict["unnormed"] == "not width-stable (tentative: widths span only 4×): slope beyond ±0.3 in " + \
        ", ".join(f"{layer} {q} {v:+.2f}" for layer, q, v in named) + "; the updates themselves grow along the " \
        "width (own_delta_rms): expect the optimal LR to fall as the width grows"


BAD_MODELS = '''
from modula_cli.nn import Flatten, Linear

def not_a_module(arch, data):
    return 3

def wrong_output(arch, data):
    return Linear(7, arch.width) @ Linear(arch.width, 3072) @ Flatten()

def wrong_input(arch, data):
    return Linear(10, arch.width) @ Linear(arch.width, 100) @ Flatten()

def raises(arch, data):
    raise RuntimeError("no such layer")

def fits(arch, data):
    return Linear(data.num_classes, arch.width) @ Linear(arch.width, 3072) @ Flatten()

NOT_CALLABLE = 5
'''


@pytest.fixture
def bad_models(tmp_path, monkeypatch):
    (tmp_path / "bad_models.py").write_text(BAD_MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("bad_models", None)


IMAGES = SimpleNamespace(name="cifar10", kind="image", input_shape=(3, 32, 32), num_classes=10)


@pytest.mark.parametrize("function, message", [
    ("not_a_module", "arch.name='bad_models:not_a_module' returned int, neither a torch.nn.Module nor a "
                     "modula_cli.nn.Module (return your torch model, or build one from modula_cli.nn's atoms)"),
    ("wrong_output", "arch.name='bad_models:wrong_output': expected (B, 10) logits for cifar10 (input (B, 3, 32, "
                     "32)), got (B, 7); its readout has 7 outputs: build it with data.num_classes (10)"),
    ("wrong_input", "arch.name='bad_models:wrong_input' does not fit data=cifar10 (input (2, 3, 32, 32)): "
                    "RuntimeError: "),
    ("raises", "arch.name='bad_models:raises' failed to build for data=cifar10 (image data): RuntimeError: no such "
               "layer"),
    ("missing", "arch.name='bad_models:missing': missing is not defined in "),
    ("NOT_CALLABLE", "arch.name='bad_models:NOT_CALLABLE': NOT_CALLABLE is not callable in "),
])
def test_user_architecture_errors_are_one_line_each(bad_models, function, message):
    arch = OmegaConf.create({"name": f"bad_models:{function}", "width": 8})
    with pytest.raises(ModelError) as error:
        build_model(arch, IMAGES)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_user_architecture_imports_from_the_working_folder_and_is_validated_before_launch(bad_models):
    arch = OmegaConf.create({"name": "bad_models:fits", "width": 8})
    net = build_model(arch, IMAGES)  # found in the working folder, which is not on sys.path
    assert net(torch.zeros(4, 3, 32, 32), net.initialize()).shape == (4, 10)
    cfg = compose_config("data=cifar10", "arch.name=nowhere_module:fn", "train.device=cpu")
    assert [p for p in config_problems(cfg) if p.startswith("arch.name=")] == [
        "arch.name='nowhere_module:fn': cannot import nowhere_module (ModuleNotFoundError: No module named "
        "'nowhere_module'); run from the folder that holds it or add that folder to PYTHONPATH"]
    # A user's architecture reads any dataset kind: the data-kind rule of the built-in ones does not apply.
    cfg = compose_config("data=shakespeare", "arch.name=bad_models:fits", "train.device=cpu")
    assert not [p for p in config_problems(cfg) if p.startswith("arch")]


def test_a_run_of_an_unfit_architecture_stops_with_one_line_and_leaves_nothing(bad_models, cifar_root):
    """The network is built before the run writes anything: its fresh folder goes, an earlier run's stays."""
    from modula_cli.train import run_or_exit

    cfg = compose_config("arch.name=bad_models:wrong_output", "arch.width=8", "data=cifar10",
                         f"data.root={cifar_root}", "train.device=cpu", "train.progress=false")
    fresh, earlier = bad_models / "fresh", bad_models / "earlier"
    fresh.mkdir()
    earlier.mkdir()
    (earlier / "notes.txt").write_text("an earlier run's file")
    for run_dir in (fresh, earlier):
        with pytest.raises(SystemExit) as stop:
            run_or_exit(cfg, run_dir)
        assert str(stop.value.code) == (
            "modula-sweep: arch.name='bad_models:wrong_output': expected (B, 10) logits for cifar10 (input (B, 3, "
            "32, 32)), got (B, 7); its readout has 7 outputs: build it with data.num_classes (10)")
    assert not fresh.exists()
    assert [p.name for p in earlier.iterdir()] == ["notes.txt"]


def test_a_sweep_records_an_unfit_architecture_as_failed(bad_models, cifar_root):
    """In a sweep the report must count the run: it is recorded as failed (and the run folder kept)."""
    from modula_cli.run.trainer import train

    cfg = compose_config("arch.name=bad_models:wrong_output", "arch.width=8", "data=cifar10",
                         f"data.root={cifar_root}", "train.device=cpu", "train.progress=false")
    run_dir = bad_models / "sweep" / "width=8"
    with pytest.raises(ModelError):
        train(cfg, run_dir, sweep_dir=run_dir.parent)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "expected (B, 10) logits for cifar10" in summary["error"]


# --- batch size, horizon and weight decay as scale axes ------------------------------------------------------

def test_knobs_include_batch_size_steps_and_weight_decay():
    cfg = compose_config("train.batch_size=16", "train.steps=300", "optim.wd=0.25")
    knobs = RunIdentity.of(cfg, 0.1, 0).knobs
    assert (knobs["batch_size"], knobs["steps"], knobs["wd"]) == (16, 300, 0.25)


def test_warmup_fraction_stretches_with_the_run():
    """``optim.warmup_fraction=0.1``: the first step's LR is 1/10 of the base over 100 steps, 1/20 over 200."""
    for total, first in ((100, 0.1), (200, 0.05)):
        w = [torch.zeros(2, 2, requires_grad=True)]
        opt = OptimConfig(name="sgd", mode="unnormed", lr=1.0, warmup_fraction=0.1, schedule="constant")
        lr = optimizer_step(Linear(2, 2), w, [torch.ones(2, 2)], init_state(w, opt), opt, 0, total)
        assert float(lr) == pytest.approx(first)
    cfg = compose_config("optim.warmup_fraction=0.1", "optim.warmup_steps=5")
    assert any("set one of them" in p for p in config_problems(cfg))
    assert any("optim.warmup_fraction=1.5" in p for p in config_problems(compose_config("optim.warmup_fraction=1.5")))


def test_weight_decay_sweep_reports_along_wd(tiny_text_root, tmp_path):
    """``sweep=weight_decay``: wd is the scale axis of every table, and the decay changes the runs."""
    overrides = tiny_gpt(tiny_text_root, "sweep=weight_decay", "optim.wd=0.25,4.0", "optim.lr=0.1,0.3",
                         "train.steps=6", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    result = prewarmed.run([sys.executable, "-m", "modula_cli.train", *overrides], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    transfer = pd.read_csv(tmp_path / "sweep" / "transfer.csv")
    assert transfer[["scale_knob", "smallest", "largest"]].values.tolist() == [["wd", 0.25, 4.0]]
    runs = pd.read_csv(tmp_path / "sweep" / "results.csv")
    losses = runs.pivot_table(index="lr", columns="wd", values="train_loss")
    assert (losses[0.25] != losses[4.0]).all()


@pytest.mark.parametrize("source, message", [
    ("def build(arch, data):\n    return (\n", "cannot import broken_models (SyntaxError: '(' was never closed at "
                                                "{file}, line 2); fix that line"),
    ("import not_installed_pkg\n", "cannot import broken_models (ModuleNotFoundError: No module named "
                                   "'not_installed_pkg'); it imports 'not_installed_pkg': install it, or put it "
                                   "beside the file"),
    ("raise RuntimeError('no GPU here')\n", "cannot import broken_models (RuntimeError: no GPU here, raised while "
                                            "importing it); fix the module"),
])
def test_a_builder_that_does_not_import_gets_the_hint_its_cause_needs(tmp_path, monkeypatch, source, message):
    """Only a module that is not found gets "run from the folder that holds it": a syntax error names its line, a
    missing dependency names itself, anything else raised while importing is said as it is."""
    from modula_cli.models.builders import import_builder

    (tmp_path / "broken_models.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("broken_models", None)
    with pytest.raises(ModelError) as error:
        import_builder("broken_models:build")
    sys.modules.pop("broken_models", None)
    assert str(error.value) == "arch.name='broken_models:build': " + message.format(
        file=tmp_path / "broken_models.py")
