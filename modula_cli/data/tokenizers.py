"""Tokenizers for the language datasets: tiktoken's encodings (GPT-2's BPE and the rest), an offline byte-level
encoding, characters (a corpus's own alphabet, as nanoGPT's shakespeare_char), and a Hugging Face tokenizer saved
in a local folder (``transformers.AutoTokenizer``, the ``hf`` extra)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import tiktoken

from ..plumbing.errors import cause_text
from .identity import path_digest
from .storage import NETWORK_TIMEOUT_S, DataUnavailable

TOKENIZERS = ("gpt2", "byte")  # what the hub datasets (tinystories, openwebtext) take
BUILT_IN = ("byte", "char")  # made in code; every other name is tiktoken's or a tokenizer folder
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")  # save_pretrained writes one


@dataclass
class TextTokenizer:
    """Text to token ids: ``encode`` a document, ``vocab_size`` ids, ``eot`` the end-of-text id that follows each
    document (None: documents are joined as they are), ``vocab`` the symbols of a character tokenizer."""

    name: str
    encode: Callable[[str], list[int]]
    vocab_size: int
    eot: int | None
    vocab: list[str] = field(default_factory=list)


def tokenizer_problem(name: str) -> str | None:
    """Why ``data.tokenizer=name`` cannot be used (a one-line clause), or None: checked before any run."""
    if name in BUILT_IN or name in tiktoken.list_encoding_names():
        return None
    folder = Path(name).expanduser()
    if folder.is_dir() and any((folder / f).is_file() for f in HF_TOKENIZER_FILES):
        return None
    where = "a folder without a tokenizer file" if folder.is_dir() else "neither a known name nor a folder"
    return (f"data.tokenizer={name!r} is {where}; allowed: {', '.join((*BUILT_IN, *tiktoken.list_encoding_names()))}"
            f", or a folder saved by a Hugging Face tokenizer's save_pretrained ({' or '.join(HF_TOKENIZER_FILES)})")


def tokenizer_tag(name: str) -> str:
    """A name for the tokenizer in a cache folder's name: its own, or a folder's hash (an edited folder: another)."""
    if name in BUILT_IN or name in tiktoken.list_encoding_names():
        return name
    return f"hf-{path_digest(name)}"


def text_tokenizer(name: str, texts: Callable[[], Iterable[str]] | None = None) -> TextTokenizer:
    """The tokenizer ``name``; ``texts`` gives the corpus's documents, which a character tokenizer needs to
    know its alphabet (sorted, as nanoGPT's shakespeare_char)."""
    if name == "char":
        symbols = sorted(set().union(*(set(text) for text in texts()))) if texts is not None else []
        index = {c: i for i, c in enumerate(symbols)}
        return TextTokenizer("char", lambda text: [index[c] for c in text], len(symbols), None, symbols)
    if name in ("byte", *tiktoken.list_encoding_names()):
        encoding = get_tokenizer(name)
        return TextTokenizer(name, encoding.encode_ordinary, encoding.n_vocab, encoding.eot_token)
    return _hf_tokenizer(name)


def _hf_tokenizer(folder: str) -> TextTokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise DataUnavailable(f"data.tokenizer={folder}: a Hugging Face tokenizer folder needs transformers "
                              f"(pip install -e \".[hf]\")") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(Path(folder).expanduser()), local_files_only=True)
    except Exception as error:  # noqa: BLE001 - whatever the folder lacks, said in one line
        raise DataUnavailable(f"data.tokenizer={folder}: not a readable tokenizer folder ({cause_text(error)})"
                              ) from None
    encode = functools.partial(tokenizer.encode, add_special_tokens=False)
    return TextTokenizer(folder, encode, len(tokenizer), tokenizer.eos_token_id)


def byte_encoding() -> tiktoken.Encoding:
    """256 byte symbols plus end-of-text (id 256), built in code: no download, for offline runs and tests."""
    return tiktoken.Encoding(
        name="modula_byte",
        pat_str=r"[\s\S]",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={"<|endoftext|>": 256},
    )


def get_tokenizer(name: str) -> tiktoken.Encoding:
    if name == "byte":
        return byte_encoding()
    if name in tiktoken.list_encoding_names():
        return _tiktoken(name)
    raise ValueError(f"unknown tokenizer {name!r}; allowed: {', '.join(TOKENIZERS)}")


def _tiktoken(name: str) -> tiktoken.Encoding:
    """tiktoken downloads the BPE files on first use with ``requests.get`` and no timeout (offline behind a
    silent firewall it would wait minutes): give that call one for the while. The patch is process-wide, so
    it is only taken here, while the dataset is prepared in the main thread before any training."""
    try:
        with ExitStack() as stack:
            with suppress(ImportError):  # a tiktoken that fetches otherwise goes without
                import requests

                stack.enter_context(mock.patch.object(requests, "get", functools.partial(
                    requests.get, timeout=NETWORK_TIMEOUT_S)))
            return tiktoken.get_encoding(name)
    except Exception as error:  # noqa: BLE001 - any failure to get the files is the same missing data
        # A clause, not a whole line: the dataset that needs the tokenizer says what to do.
        raise DataUnavailable(f"the {name} tokenizer files are neither in tiktoken's cache ($TIKTOKEN_CACHE_DIR) nor "
                              f"downloadable ({cause_text(error, innermost=True)})") from error
