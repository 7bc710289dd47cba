"""The three plain-torch examples end to end, from copies of their folders as a user runs them (README, "Your
PyTorch model"): a coordinate check, a sweep (grid, packed, and the LR search) and the report, on generated data in
the real formats."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import prewarmed

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BIN = Path(sys.executable).parent
TINY = ["train.device=cpu", "train.eval_every=0", "train.eval_batches=1", "train.batch_size=4", "train.log_every=5",
        "train.progress=false"]
pytestmark = pytest.mark.slow


def _run(tool: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return prewarmed.run([str(BIN / tool), *args], cwd=folder, capture_output=True, text=True, timeout=600)


def _copy(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns("__pycache__", "outputs"))
    return folder


def _sweep_dir(folder: Path, sweep: str) -> Path:
    found = list((folder / "outputs" / "sweeps" / sweep).iterdir())
    assert len(found) == 1, found
    return found[0]


def test_torch_gpt_coordinate_check_packed_sweep_search_and_report(tmp_path, tiny_text_root):
    folder = _copy("torch_gpt", tmp_path)
    data = ["data=shakespeare", f"data.root={tiny_text_root}", "data.context=16"]
    check = _run("modula-coord-check", folder, "--config-dir", "configs", "arch=torch_gpt", *data,
                 "coord.widths=[16,32,64]", "coord.modes=[mup,unnormed]", "arch.head_dim=8", "optim.mup.base_width=16",
                 "hydra.run.dir=coord", "train.device=cpu")
    assert check.returncode == 0, check.stderr
    table = pd.read_csv(folder / "coord" / "coord.csv")
    assert {"h.0.attn.c_attn.weight", "lm_head.weight", "wte.weight"} <= set(table["layer"])
    assert table["update_rms"].notna().any()
    verdict = (folder / "coord" / "verdict.txt").read_text()
    assert "mup: " in verdict and "unnormed: not width-stable" in verdict, verdict
    sweep = _run("modula-sweep", folder, "--config-dir", "configs", "arch=torch_gpt", *data, *TINY, "sweep=width",
                 "arch.width=16,32", "arch.head_dim=8", "optim.mode=muon", "optim.lr=0.004,0.016",
                 "train.seed=0,1", "sweep.pack=true", "train.steps=10", "variant=modular")
    assert sweep.returncode == 0, sweep.stderr
    results = pd.read_csv(_sweep_dir(folder, "width") / "results.csv")
    assert len(results) == 8 and set(results["status"]) == {"completed"}
    assert set(results["mode"]) == {"muon"}
    search = _run("modula-sweep", folder, "--config-dir", "configs", "arch=torch_gpt", *data, *TINY, "sweep=lr",
                  "arch.width=16", "arch.head_dim=8", "optim.mode=mup", "optim.mup.base_width=16", "sweep.search=true",
                  "train.steps=10", "variant=modular", "hydra.sweep.dir=search")
    assert search.returncode == 0, search.stderr
    report = _run("modula-sweep-report", folder, str(_sweep_dir(folder, "width")))
    # Muon with the optimiser of its other parameters; no variant: neither reading applies to a plain torch model
    assert report.returncode == 0 and "muon+adam (torch_gpt:torch_gpt, shakespeare)  (" in report.stdout, report.stdout
    assert _sweep_dir(folder, "width").name == "torch_gpt-torch_gpt_shakespeare"  # no _paper suffix


def test_torchvision_resnet_sweeps_under_mup_with_its_batch_norm(tmp_path, cifar_root):
    folder = _copy("torchvision_resnet", tmp_path)
    data = ["data=cifar10", f"data.root={cifar_root}", "data.augment=none"]
    packed = _run("modula-sweep", folder, "--config-dir", "configs", "arch=torchvision_resnet", *data, *TINY,
                  "sweep=width", "arch.width=8,16", "optim.mode=mup", "optim.mup.base_width=8", "optim.lr=0.01,0.02",
                  "sweep.pack=true", "train.steps=4")
    assert packed.returncode != 0
    assert "cannot be packed (torch.func.vmap" in packed.stdout + packed.stderr
    shutil.rmtree(folder / "outputs")
    sweep = _run("modula-sweep", folder, "--config-dir", "configs", "arch=torchvision_resnet", *data, *TINY,
                 "sweep=width", "arch.width=8,16", "optim.mode=mup", "optim.mup.base_width=8", "optim.lr=0.01",
                 "train.steps=4")
    assert sweep.returncode == 0, sweep.stderr
    results = pd.read_csv(_sweep_dir(folder, "width") / "results.csv")
    assert sorted(results["width"]) == [8, 16] and set(results["status"]) == {"completed"}


def test_hugging_face_gpt2_sweeps_under_mup_and_muon(tmp_path, tiny_text_root):
    pytest.importorskip("transformers", reason="examples/hf_gpt2 needs transformers (pip install -e '.[hf]')")
    folder = _copy("hf_gpt2", tmp_path)
    data = ["data=shakespeare", f"data.root={tiny_text_root}", "data.context=16"]
    sweep = _run("modula-sweep", folder, "--config-dir", "configs", "arch=hf_gpt2", *data, *TINY, "sweep=width",
                 "arch.width=32,64", "optim.mode=mup,muon", "optim.mup.base_width=32", "optim.lr=0.01",
                 "train.steps=4", "sweep.pack=true")
    assert sweep.returncode == 0, sweep.stderr
    results = pd.read_csv(_sweep_dir(folder, "width") / "results.csv")
    assert len(results) == 4 and set(results["mode"]) == {"mup", "muon"} and set(results["status"]) == {"completed"}


def test_an_edited_model_trains_afresh_and_the_report_says_why(tmp_path, tiny_text_root):
    """The same sweep after an edit of the model's file: the earlier runs are not reused but trained again, with a
    note naming the edited module."""
    folder = tmp_path / "mine"
    (folder / "configs" / "arch").mkdir(parents=True)
    (folder / "configs" / "arch" / "mine.yaml").write_text("name: mine:bigram\nwidth: 8\n")
    model = ("import torch\n\n\ndef bigram(arch, data):\n    return torch.nn.Sequential(torch.nn.Embedding("
             "data.vocab_size, arch.width), torch.nn.Linear(arch.width, data.vocab_size))\n")
    (folder / "mine.py").write_text(model)
    args = ["--config-dir", "configs", "arch=mine", "data=shakespeare", f"data.root={tiny_text_root}",
            "data.context=8", *TINY, "sweep=width", "arch.width=8,16", "optim.mode=unnormed", "optim.lr=0.01",
            "train.steps=3", "hydra.sweep.dir=sweep"]
    first = _run("modula-sweep", folder, *args)
    assert first.returncode == 0, first.stderr
    (folder / "mine.py").write_text(model + "# edited\n")
    second = _run("modula-sweep", folder, *args)
    assert second.returncode == 0, second.stderr
    said = second.stdout + second.stderr
    assert "2 completed, 0 skipped" in said
    assert "2 runs here finished with an earlier version of mine (its file changed): trained again, their results " \
           "replaced" in said
    assert len(pd.read_csv(folder / "sweep" / "results.csv")) == 2
    (folder / "mine.py").write_text(model + "# edited again\n")  # a new width beside the earlier version's runs
    third = _run("modula-sweep", folder, *[a if a != "arch.width=8,16" else "arch.width=32" for a in args])
    assert third.returncode == 0, third.stderr
    assert "(source: the file that defines the model changed between runs, so its runs are kept apart)" in \
        third.stdout + third.stderr


def test_nanogpt_with_its_own_corpus_and_recipe_checks_searches_and_predicts(tmp_path):
    """Karpathy's nanoGPT model.py in its own shape (forward(idx, targets) → (logits, loss), lm_head tied to wte, a
    printed parameter count) with a builder of a few lines, on a corpus of the user's own in nanoGPT's token files
    (the example's prepare.py: stdlib docstrings, a BPE trained offline) and the user's recipe (AdamW on matrices,
    WSD, clipping): a packed μP sweep with the LR search, the report's LR at a target width and the optimiser it
    belongs to, none of it touching the package (the coordinate check on a plain model: the torch_gpt test)."""
    folder = _copy("nanogpt", tmp_path)
    prepared = prewarmed.run([sys.executable, "prepare.py", "data/stdlib", "300"], cwd=folder, capture_output=True,
                             text=True, timeout=600)
    assert prepared.returncode == 0, prepared.stderr
    own = ["arch=nanogpt", "data=stdlib", "data.context=16", "optim=recipe", "arch.head_dim=8",
           "optim.mup.base_width=16"]
    sweep = _run("modula-sweep", folder, "--config-dir", "configs", *own, *TINY, "sweep=width", "arch.width=16,32",
                 "optim.mode=mup", "train.seed=0,1", "sweep.pack=true", "sweep.search=true",
                 "train.steps=8", "sweep.target=width:128")
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    results = pd.read_csv(_sweep_dir(folder, "width") / "results.csv")
    assert set(results["status"]) == {"completed"} and set(results["mode"]) == {"mup"}
    assert set(results["data"]) == {"tokens"} and results["width"].nunique() == 2
    vocab = 300
    assert (results["train_loss"] < np.log(vocab)).all()  # below an untrained readout's loss
    assert "number of parameters:" in sweep.stdout + sweep.stderr  # the model's own print, as in nanoGPT
    config = (next(_sweep_dir(folder, "width").rglob("config.yaml"))).read_text()
    assert "schedule: wsd" in config and "grad_clip: 1.0" in config and "decay_on: matrices" in config
    report = _run("modula-sweep-report", folder, str(_sweep_dir(folder, "width")), "--target", "width=128",
                  "--recipe")
    assert report.returncode == 0, report.stderr[-3000:]
    law = pd.read_csv(_sweep_dir(folder, "width") / "law.csv")
    assert "optim.schedule=wsd" in law["recipe"][0] and "optim.grad_clip=1.0" in law["recipe"][0]
    # the printed recipe builds the optimiser for the user's own model at the target width, in their own loop
    snippet = report.stdout[report.stdout.index("import modula_cli"):report.stdout.index("# then, per step")]
    assert '"arch.width=128", "optim.lr=' in snippet, snippet
    config = snippet.split('modula_cli.optimizer(model, "')[1].split('"')[0]
    script = (f"import sys; sys.path.insert(0, '.')\nfrom omegaconf import OmegaConf\n"
              f"from modula_cli.data import build_dataset\nfrom nanogpt import nanogpt\n"
              f"arch = OmegaConf.load({config!r}).arch\narch.width = 128\n"
              f"model = nanogpt(arch, build_dataset('tokens', path='data/stdlib', context=16))\n{snippet}\n"
              f"print(type(opt).__name__, opt.lr_now)\n")
    built = prewarmed.run([sys.executable, "-c", script], cwd=folder, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0 and built.stdout.split()[-2] == "SweptOptimizer", built.stderr[-3000:]
