"""CIFAR-10 in torchvision's on-disk layout (python pickle batches), with the paper's augmentation.

Training augmentation: random crop with 4-pixel padding, horizontal flip, AutoAugment (CIFAR-10 policy);
none at test. Inputs are normalised per channel. Crop and flip are vectorised over the batch; AutoAugment
draws its policy per sample. With ``on_gpu=True`` the whole dataset stays on the GPU and batches are
augmented there.
"""

from __future__ import annotations

import pickle
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .base import EVAL_SEED, batch_rng, epoch_batch
from .storage import DataUnavailable, cause_text, data_root, fetch

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
AUGMENTATIONS = ("autoaugment", "crop_flip", "none")


# What a CIFAR batch may build: numpy arrays (as numpy 1 and numpy 2 pickle them) inside plain dicts and lists,
# and the bytes a protocol-2 pickle written by Python 3 spells as _codecs.encode(text, "latin1").
ARRAY_GLOBALS = frozenset({
    ("_codecs", "encode"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
})


class _ArraysOnly(pickle.Unpickler):
    """A data folder may be writable by others: a batch that names any other global (and so could run code
    while it is read) is refused before that global is looked up."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in ARRAY_GLOBALS:
            raise pickle.UnpicklingError(f"it names {module}.{name}, and a CIFAR batch holds only arrays and plain "
                                         f"values (reading it could run code)")
        return super().find_class(module, name)


def _read_batch(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            entry = _ArraysOnly(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as error:
        raise DataUnavailable(f"data=cifar10: {path} is refused: {error}; replace it with the official batch "
                              f"(delete the folder to extract it again)") from error
    if not isinstance(entry, dict) or "data" not in entry:
        raise DataUnavailable(f"data=cifar10: {path} is not a CIFAR batch (no 'data' array); replace it with the "
                              f"official batch (delete the folder to extract it again)")
    return entry


def _read_batches(folder: Path, names: list[str]) -> tuple[Tensor, Tensor]:
    images, labels = [], []
    for name in names:
        entry = _read_batch(folder / name)
        images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(entry["labels"] if "labels" in entry else entry["fine_labels"])
    return torch.from_numpy(np.concatenate(images)), torch.tensor(labels, dtype=torch.int64)


def _ensure_files(root: Path) -> Path:
    folder = root / "cifar10" / "cifar-10-batches-py"
    if all((folder / n).is_file() for n in TRAIN_FILES + TEST_FILES):
        return folder
    from torchvision.datasets.utils import check_integrity, extract_archive

    archive = root / "cifar10" / "cifar-10-python.tar.gz"
    fetch(URL, archive, "cifar10", missing=f"{archive} (or its extracted {folder.name}/) is missing")
    if not check_integrity(str(archive), ARCHIVE_MD5):
        raise DataUnavailable(f"data=cifar10: {archive} does not have the md5 of the official CIFAR-10 archive "
                              f"(a partial or corrupt copy); delete it and run again")
    try:
        extract_archive(str(archive), str(root / "cifar10"))
    except (OSError, EOFError, tarfile.TarError) as error:
        raise DataUnavailable(f"data=cifar10: {archive} could not be extracted into {folder.parent} "
                              f"({cause_text(error)}); free space or make the folder writable, or point data.root at "
                              f"a folder that holds cifar10/cifar-10-batches-py") from error
    return folder


def prepare_cifar10(root: str | None = None, **unused: object) -> None:
    """The CIFAR-10 batches on disk (downloaded and extracted when absent), without reading them."""
    _ensure_files(data_root(root))


@dataclass
class ImageDataset:
    """Uint8 images held in memory (or on the GPU); batches drawn without replacement per epoch."""

    name: str
    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor
    num_classes: int = 10
    augment: str = "autoaugment"
    kind: str = "image"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"data.augment={self.augment!r}; allowed: {', '.join(AUGMENTATIONS)}")
        self._autoaugment = None
        if self.augment == "autoaugment":
            from torchvision.transforms import v2

            self._autoaugment = v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_images.shape[1:])

    def _normalise(self, images: Tensor) -> Tensor:
        mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
        std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
        return (images.float() / 255.0 - mean) / std

    def _augment(self, images: Tensor, rng: np.random.Generator) -> Tensor:
        n, _, h, w = images.shape
        padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
        dy = torch.from_numpy(rng.integers(0, 9, size=n)).to(images.device)
        dx = torch.from_numpy(rng.integers(0, 9, size=n)).to(images.device)
        rows = (dy[:, None] + torch.arange(h, device=images.device))[:, None, :, None]
        cols = (dx[:, None] + torch.arange(w, device=images.device))[:, None, None, :]
        batch = torch.arange(n, device=images.device)[:, None, None, None]
        channel = torch.arange(3, device=images.device)[None, :, None, None]
        cropped = padded[batch, channel, rows, cols]
        flip = torch.from_numpy(rng.random(n) < 0.5).to(images.device)
        cropped = torch.where(flip[:, None, None, None], cropped.flip(-1), cropped)
        if self._autoaugment is not None:
            torch.manual_seed(int(rng.integers(2**62)))  # AutoAugment draws from torch's global generator
            cropped = torch.stack([self._autoaugment(image) for image in cropped])
        return cropped

    def train_batch(self, step: int, batch_size: int, seed: int,
                    device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        index = torch.from_numpy(epoch_batch(step, batch_size, len(self.train_labels), seed, self.name))
        rng = batch_rng(seed, step, 1)
        images = self.train_images[index.to(self.train_images.device)]
        if self.augment != "none":
            images = self._augment(images, rng)
        labels = self.train_labels[index.to(self.train_labels.device)]
        return self._normalise(images).to(device, non_blocking=True), labels.to(device, non_blocking=True)

    def eval_batches(self, num_batches: int, batch_size: int,
                     device: torch.device | str = "cpu") -> list[tuple[Tensor, Tensor]]:
        n = len(self.test_labels)
        order = torch.from_numpy(batch_rng(EVAL_SEED).permutation(n))
        batches = []
        for i in range(min(num_batches, max(1, n // batch_size))):
            index = order[i * batch_size:(i + 1) * batch_size].to(self.test_images.device)
            batches.append((self._normalise(self.test_images[index]).to(device),
                            self.test_labels[index].to(device)))
        return batches

    def describe(self) -> str:
        return (f"{self.name}: {len(self.train_labels):,} train / {len(self.test_labels):,} test images "
                f"{self.input_shape}, augmentation {self.augment}")


def cifar10(root: str | None = None, augment: str = "autoaugment", on_gpu: bool = False,
            max_train: int | None = None, **unused: object) -> ImageDataset:
    folder = _ensure_files(data_root(root))
    train_images, train_labels = _read_batches(folder, TRAIN_FILES)
    test_images, test_labels = _read_batches(folder, TEST_FILES)
    if max_train:
        train_images, train_labels = train_images[:max_train], train_labels[:max_train]
    if on_gpu:
        if not torch.cuda.is_available():
            raise ValueError("data.on_gpu=true needs a CUDA GPU, and none is visible")
        train_images, train_labels, test_images, test_labels = (
            t.cuda() for t in (train_images, train_labels, test_images, test_labels))
    return ImageDataset("cifar10", train_images, train_labels, test_images, test_labels, augment=augment,
                        meta={"source": str(folder), "train_images": len(train_labels)})
