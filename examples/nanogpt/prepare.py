"""A corpus of your own in nanoGPT's format, made offline: the docstrings of the Python standard library's modules
(the text of the Python you run, so it differs a little between Python versions), tokenised by a byte-level BPE
trained on it (Hugging Face ``tokenizers``, from the ``dev`` or ``hf`` extra), written as nanoGPT's
``data/*/prepare.py`` writes its output: ``train.bin`` and ``val.bin`` (uint16) and ``meta.pkl`` (vocab_size).

    python prepare.py                    # into ./data/stdlib (what configs/data/stdlib.yaml reads)
    python prepare.py /tmp/stdlib 2000   # elsewhere, with a vocabulary of 2000
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np

SKIPPED = ("antigravity", "this", "idlelib", "tkinter", "turtle", "test", "lib2to3", "ensurepip", "venv")
VAL_FRACTION = 0.1


def stdlib_docstrings() -> list[str]:
    """Every documented module, class and function of the standard library's top-level modules, in name order."""
    docs = []
    names = sorted(set(sys.stdlib_module_names) - set(SKIPPED))
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this platform lacks (winreg) is simply not in the corpus
            continue
        docs.append(inspect.getdoc(module) or "")
        for _, member in sorted(inspect.getmembers(module), key=lambda item: item[0]):
            if (inspect.isclass(member) or inspect.isfunction(member)) and getattr(member, "__module__", "") == name:
                docs.append(inspect.getdoc(member) or "")
    return [d for d in docs if len(d) > 40]


def train_bpe(docs: list[str], vocab_size: int):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(docs, trainer)
    return tokenizer


def main(folder: Path, vocab_size: int) -> None:
    docs = stdlib_docstrings()
    tokenizer = train_bpe(docs, vocab_size)
    eot = tokenizer.token_to_id("<|endoftext|>")
    ids = np.concatenate([np.asarray([*e.ids, eot], dtype=np.uint16) for e in tokenizer.encode_batch(docs)])
    cut = int(len(ids) * (1 - VAL_FRACTION))
    folder.mkdir(parents=True, exist_ok=True)
    ids[:cut].tofile(folder / "train.bin")
    ids[cut:].tofile(folder / "val.bin")
    with open(folder / "meta.pkl", "wb") as handle:
        pickle.dump({"vocab_size": tokenizer.get_vocab_size(), "source": "Python standard library docstrings"}, handle)
    tokenizer.save(str(folder / "tokenizer.json"))
    print(f"{len(docs):,} docstrings, {len(ids):,} tokens ({cut:,} train), vocabulary {tokenizer.get_vocab_size()}"
          f" → {folder}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/stdlib"), int(sys.argv[2]) if len(sys.argv) > 2 else 4096)
