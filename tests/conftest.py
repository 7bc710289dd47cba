import pickle
from pathlib import Path

import numpy as np
import pytest

SHARED_SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "shakespeare" / "input.txt"


def write_cifar_batches(folder: Path, per_batch: int = 16, test_size: int = 24, seed: int = 0) -> None:
    """CIFAR-10 in the official python pickle layout, with each image's first pixel holding its index."""
    rng = np.random.default_rng(seed)
    target = folder / "cifar10" / "cifar-10-batches-py"
    target.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for b, name in enumerate(names):
        n = test_size if name == "test_batch" else per_batch
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        data[:, 0] = np.arange(n) + (0 if name == "test_batch" else b * per_batch)
        entry = {"batch_label": name, "labels": [int(x) for x in rng.integers(0, 10, n)], "data": data,
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
