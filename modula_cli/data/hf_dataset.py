"""``data=hf_dataset``: a Hugging Face dataset of documents, tokenised once into a cached token folder.

``data.path`` is a folder written by ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``), or a hub name where
the machine has the network (or the Hugging Face cache has it). The train split is ``train`` (or the dataset
itself); the test split is ``validation`` or ``test`` where there is one, else the last ``data.holdout`` of the
train tokens. The text is in ``data.text_field``; the tokenizers are ``data=text_files``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from .identity import combined, path_digest
from .storage import DataUnavailable, data_root
from .text import load_hub
from .text_files import Documents, write_token_files
from .tokenizers import tokenizer_problem, tokenizer_tag

TEST_SPLITS = ("validation", "test")
BATCH_DOCUMENTS = 1024


@dataclass(frozen=True)
class HubCorpus:
    """A ``data=hf_dataset`` config's dataset: where it is, which column, how it is tokenised, and its cache."""

    path: str | None = None
    text_field: str = "text"
    tokenizer: str = "gpt2"
    holdout: float = 0.1
    root: str | None = None

    @classmethod
    def of(cls, **options: object) -> HubCorpus:
        return cls(**{f.name: options[f.name] for f in fields(cls) if f.name in options})

    @property
    def folder(self) -> Path | None:
        """The local folder ``path`` names (None: a hub name)."""
        folder = Path(str(self.path)).expanduser()
        return folder if folder.is_dir() or str(self.path).startswith(("/", "./", "../", "~")) else None

    def problem(self) -> str | None:
        if self.path is None:
            return "data=hf_dataset needs data.path: a folder written by save_to_disk, or a hub dataset name"
        folder = self.folder
        if folder is not None and not folder.is_dir():
            return f"data.path={self.path}: no such folder (a local dataset is a folder written by save_to_disk)"
        return tokenizer_problem(str(self.tokenizer))

    def identity(self) -> str | None:
        """A local dataset's files (a hub name is its own identity, already in the settings) and a tokenizer
        folder's."""
        if self.problem():
            return None
        tokenizer_folder = Path(str(self.tokenizer)).expanduser()
        return combined(path_digest(self.folder) if self.folder else None,
                        path_digest(tokenizer_folder) if tokenizer_folder.is_dir() else None)

    def cache(self) -> tuple[Path, dict]:
        key = combined(self.identity() or str(self.path), str(self.path), self.text_field, str(self.holdout))
        expected = {"dataset": "hf_dataset", "source": str(self.path), "key": key, "tokenizer": str(self.tokenizer)}
        return data_root(self.root) / "hf_dataset" / f"{tokenizer_tag(str(self.tokenizer))}-{key}", expected

    def load(self):
        """The dataset (or dict of splits), from disk or the hub."""
        import datasets

        if self.folder is None:
            return load_hub(str(self.path))
        try:
            return datasets.load_from_disk(str(self.folder))
        except (FileNotFoundError, ValueError) as error:
            raise DataUnavailable(f"data.path={self.path}: not a dataset written by save_to_disk ({error})") from None

    def build(self, folder: Path) -> dict:
        """Tokenise the dataset's train split and its test split (or a holdout) into ``folder``: its metadata."""
        loaded = self.load()
        if hasattr(loaded, "keys"):  # a DatasetDict
            if "train" not in loaded:
                raise DataUnavailable(f"data=hf_dataset: {self.path} has no train split (splits: {', '.join(loaded)})")
            train, test = loaded["train"], next((loaded[s] for s in TEST_SPLITS if s in loaded), None)
        else:
            train, test = loaded, None
        return write_token_files(self.column(train), self.column(test) if test is not None else None,
                                 str(self.tokenizer), self.holdout, folder)

    def column(self, split) -> Documents:
        if self.text_field not in split.column_names:
            raise DataUnavailable(f"data=hf_dataset: {self.path} has no column {self.text_field!r} (columns: "
                                  f"{', '.join(split.column_names)}); set data.text_field")

        def texts() -> Iterator[str]:
            for batch in split.iter(batch_size=BATCH_DOCUMENTS):
                yield from (text for text in batch[self.text_field] if text)

        return texts
