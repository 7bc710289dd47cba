"""Datasets: the registry (``registry.py``: a new dataset is one builder, one entry there and one YAML file in
``configs/data/``; a user's own is a function named by import path, ``user.py``, or their files in a format that
needs no code), the token and image datasets, and their on-disk caches. Names load on first use
(``plumbing/lazy.py``): ``data.config`` is read by the command line's checks without importing torch."""

from ..plumbing.lazy import exports_of, lazy_exports

_EXPORTS = exports_of({
    ".registry": ("CONFIG_ONLY_KEYS", "DATASETS", "Dataset", "DatasetEntry", "build_dataset", "data_identity",
                  "dataset_entry", "prepare_dataset"),
    ".base": ("TokenDataset",),
    ".cifar10": ("ImageDataset",),
    ".images": ("SampleImageDataset",),
    ".user": ("ImageSplits", "TokenSplits"),
    ".storage": ("DataUnavailable", "cause_text"),
})
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
