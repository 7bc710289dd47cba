"""The ``data`` config group's schema. It is an open group: the keys beyond these are the dataset builder's
options (configs/data/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from ..plumbing.settings import setting


@dataclass
class DataConfig:
    """The keys every dataset has; the rest are its builder's options (configs/data/*.yaml)."""
    name: str = setting("shakespeare", "shakespeare | tinystories | openwebtext | cifar10, your files: tokens | "
                                       "text_files | hf_dataset | image_folder, or package.module:function")
    root: str | None = setting(None, "data folder; null: $MODULA_DATA, else the repository's data/")
    context: int | None = setting(None, "tokens per sequence (language data)", minimum=1)
    max_context: int | None = setting(None, "a guard against typos in data.context", minimum=1)
