import json
import os
import pickle
import re
from pathlib import Path

# The caller's shell must not change a test's outcome. Switches that the code under test or its libraries read
# from the environment are cleared for the whole suite and every process it starts, before any library reads
# them (the Hugging Face libraries read theirs once, at import): as on a clean machine. SLURM's job variables go
# too (a suite run inside `srun` or `salloc`); SLURM_CONF, which says where the cluster is, stays. Kept on
# purpose: MODULA_DATA (where README puts the real data), MODULA_CLUSTER_TESTS and MODULA_DATA_TESTS (CI's word
# that the engines are up and the real data is there) and CUDA_VISIBLE_DEVICES (which GPU the GPU checks use; no
# other test reads it).
CALLER_SWITCHES = re.compile(
    r"^(HF_DATASETS_OFFLINE|HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE|HF_ENDPOINT|WANDB_.*|RAY_ADDRESS|RAY_NAMESPACE"
    r"|(SLURM|SBATCH|SALLOC|SRUN)_(?!CONF$).*|OMP_NUM_THREADS|MKL_NUM_THREADS|HYDRA_FULL_ERROR"
    r"|MODULA_(JOB_CPUS|JOB_ID|SWEEP_LAUNCH|SWEEP_CWD))$")
for _name in [name for name in os.environ if CALLER_SWITCHES.match(name)]:
    del os.environ[_name]

import numpy as np  # noqa: E402 - after the environment is cleared
import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# Under pytest-xdist each worker is one of the machine's processes: torch's default of one thread per core
# in every worker oversubscribes the cores (measured on 2 cores: a 0.4 s test took 13 s beside another).
# Subprocesses (the sweeps the tests launch) choose their own threads, as a user's runs do.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


def shakespeare_candidates() -> list[Path]:
    """Where the real input.txt may be, in the order looked at: where README tells users to put it (data.root's
    default: $MODULA_DATA, else the repository's data/), then the shared copy beside the repository."""
    roots = [Path(os.environ["MODULA_DATA"]).expanduser()] if os.environ.get("MODULA_DATA") else []
    roots += [REPO / "data", REPO.parent / "shared" / "data"]
    return [root / "shakespeare" / "input.txt" for root in roots]


def find_shakespeare() -> Path | None:
    return next((p for p in shakespeare_candidates() if p.is_file()), None)


def require_shakespeare() -> Path:
    """The real Shakespeare input.txt, or a skip whose one line names every place looked at; a failure instead
    where the text must be there (CI sets ``MODULA_DATA_TESTS=required``: the shared data is on its machine)."""
    found = find_shakespeare()
    if found is None:
        missing = pytest.fail if os.environ.get("MODULA_DATA_TESTS") == "required" else pytest.skip
        missing("needs Shakespeare's input.txt; looked in " + ", ".join(map(str, shakespeare_candidates())))
    return found


@pytest.fixture
def real_shakespeare() -> Path:
    return require_shakespeare()


@pytest.fixture(autouse=True)
def _fixed_global_seed():
    """Every test starts from the same global RNG state, so a result never depends on which tests ran
    before it (or on -k selecting it alone)."""
    torch.manual_seed(0)


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


@pytest.fixture
def cifar_root(tmp_path):
    write_cifar_batches(tmp_path)
    return tmp_path


@pytest.fixture
def tiny_text_root(tmp_path):
    """A small character corpus laid out like Shakespeare's input.txt."""
    root = tmp_path / "data"
    (root / "shakespeare").mkdir(parents=True)
    text = "".join(f"To be, or not to be: line {i}.\n" for i in range(400))
    (root / "shakespeare" / "input.txt").write_text(text)
    return root


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
    """The training iterations a run of ``cfg`` takes: train.steps, and the paper variant's extra one at LR 0."""
    return cfg.train.steps + int(cfg.variant.extra_step)


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

    data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "train_loss" in r]
    before = []
    with torch.no_grad():
        for record in records[-5:]:
            x, y = data.train_batch(record["step"], cfg.train.batch_size, cfg.train.seed, device=initial[0].device)
            logits = net(x, initial).float()
            before.append(float(torch.nn.functional.cross_entropy(logits.flatten(0, -2), y.flatten())))
    return sum(before) / 5 - sum(r["train_loss"] for r in records[-5:]) / 5
