"""Image datasets of samples: any torch ``Dataset`` yielding ``(image tensor, label)`` (a user's data function's),
and ``data=image_folder``, torchvision's ``ImageFolder`` layout (``data.path`` with ``train/`` and ``test/`` or
``val/``, one folder per class in each).

Batches are drawn as CIFAR-10's are (an epoch's permutation from the seed, without replacement), and a sample's
random transforms draw from torch's generator seeded by (seed, step): a resumed run sees the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..plumbing.errors import cause_text
from .base import EVAL_SEED, batch_rng, epoch_batch
from .identity import listing_digest
from .storage import DataUnavailable

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # the usual normalisation
AUGMENTATIONS = ("crop_flip", "none")
TEST_FOLDERS = ("test", "val")


@dataclass
class SampleImageDataset:
    """Images read sample by sample from torch Datasets; each ``(image, label)`` with a (C, H, W) image."""

    name: str
    train: Any
    test: Any
    num_classes: int
    kind: str = "image"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split, dataset in (("train", self.train), ("test", self.test)):
            if len(dataset) == 0:
                raise DataUnavailable(f"data={self.name}: its {split} split has no samples")
        image, _ = self.train[0]
        if not isinstance(image, Tensor) or image.ndim != 3:
            shape = tuple(image.shape) if isinstance(image, Tensor) else type(image).__name__
            raise DataUnavailable(f"data={self.name}: a train sample's image is {shape}; expected a (channels, "
                                  f"height, width) tensor (e.g. torchvision's ToImage and ToDtype transforms)")
        self.input_shape = tuple(image.shape)

    def _stack(self, dataset: Any, indices: np.ndarray, device: torch.device | str) -> tuple[Tensor, Tensor]:
        samples = [dataset[int(i)] for i in indices]
        images = torch.stack([image.float() for image, _ in samples])
        labels = torch.tensor([int(label) for _, label in samples], dtype=torch.int64)
        return images.to(device, non_blocking=True), labels.to(device, non_blocking=True)

    def train_batch(self, step: int, batch_size: int, seed: int,
                    device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        indices = epoch_batch(step, batch_size, len(self.train), seed, self.name)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(batch_rng(seed, step, 1).integers(2**62)))
            return self._stack(self.train, indices, device)

    def eval_batches(self, num_batches: int, batch_size: int,
                     device: torch.device | str = "cpu") -> list[tuple[Tensor, Tensor]]:
        n = len(self.test)
        order = batch_rng(EVAL_SEED).permutation(n)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(EVAL_SEED)
            return [self._stack(self.test, order[i * batch_size:(i + 1) * batch_size], device)
                    for i in range(min(num_batches, max(1, n // batch_size)))]

    def describe(self) -> str:
        return (f"{self.name}: {len(self.train):,} train / {len(self.test):,} test images {self.input_shape}, "
                f"{self.num_classes} classes")


def _folders(path: str | None) -> tuple[Path, Path] | str:
    """(train folder, test folder), or what is wrong with ``data.path``."""
    if path is None:
        return "data=image_folder needs data.path: a folder with train/ and test/ (or val/), a folder per class in each"
    folder = Path(str(path)).expanduser()
    if not folder.is_dir():
        return f"data.path={path}: no such folder"
    test = next((folder / name for name in TEST_FOLDERS if (folder / name).is_dir()), None)
    if not (folder / "train").is_dir() or test is None:
        missing = " and ".join(n for n, there in (("train/", (folder / "train").is_dir()), ("test/ or val/", test))
                               if not there)
        return f"data.path={path} has no {missing}; data=image_folder reads train/ and test/ (or val/) there"
    for split in (folder / "train", test):
        if not any(p.is_dir() for p in split.iterdir()):
            return (f"data.path={path}: {split.name}/ has no class folders; put each class's images in a folder of "
                    f"its own ({split.name}/cat/1.png, {split.name}/dog/2.png)")
    return folder / "train", test


def image_folder_source_problem(path: str | None = None, augment: str = "crop_flip", **unused: object) -> str | None:
    if augment not in AUGMENTATIONS:
        return f"data.augment={augment!r}; allowed for data=image_folder: {', '.join(AUGMENTATIONS)}"
    found = _folders(path)
    return found if isinstance(found, str) else None


def _transform(image_size: int, mean: Any, std: Any, augment: bool):
    from torchvision.transforms import v2

    steps = [v2.ToImage(), v2.Resize(image_size), v2.CenterCrop(image_size)]
    if augment:
        steps += [v2.RandomCrop(image_size, padding=max(1, image_size // 8)), v2.RandomHorizontalFlip()]
    return v2.Compose([*steps, v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])


def image_folder(path: str | None = None, image_size: int = 32, augment: str = "crop_flip",
                 mean: Any = IMAGENET_MEAN, std: Any = IMAGENET_STD, **unused: object) -> SampleImageDataset:
    from torchvision.datasets import ImageFolder

    if problem := image_folder_source_problem(path, augment):
        raise DataUnavailable(problem)
    train_folder, test_folder = _folders(path)
    try:
        train = ImageFolder(str(train_folder), transform=_transform(image_size, mean, std, augment == "crop_flip"))
        test = ImageFolder(str(test_folder), transform=_transform(image_size, mean, std, False))
    except (FileNotFoundError, OSError) as error:
        raise DataUnavailable(f"data=image_folder: {cause_text(error)}") from None
    if train.classes != test.classes:
        raise DataUnavailable(f"data.path={path}: train/ has classes {train.classes}, {test_folder.name}/ has "
                              f"{test.classes}; both need the same class folders")
    return SampleImageDataset("image_folder", train, test, len(train.classes),
                              meta={"source": str(Path(str(path)).expanduser().resolve()), "classes": train.classes})


def image_folder_identity(path: str | None = None, **unused: object) -> str | None:
    return listing_digest(str(path)) if path is not None else None
