"""Tokenizers for the language datasets: GPT-2 BPE (tiktoken) and an offline byte-level encoding."""

from __future__ import annotations

import functools
from contextlib import ExitStack, suppress
from unittest import mock

import tiktoken

from .storage import NETWORK_TIMEOUT_S, DataUnavailable, cause_text

TOKENIZERS = ("gpt2", "byte")


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
    if name == "gpt2":
        return _gpt2()
    raise ValueError(f"unknown tokenizer {name!r}; allowed: {', '.join(TOKENIZERS)}")


def _gpt2() -> tiktoken.Encoding:
    """tiktoken downloads the BPE files on first use with ``requests.get`` and no timeout (offline behind a
    silent firewall it would wait minutes): give that call one for the while. The patch is process-wide, so
    it is only taken here, while the dataset is prepared in the main thread before any training."""
    try:
        with ExitStack() as stack:
            with suppress(ImportError):  # a tiktoken that fetches otherwise goes without
                import requests

                stack.enter_context(mock.patch.object(requests, "get", functools.partial(
                    requests.get, timeout=NETWORK_TIMEOUT_S)))
            return tiktoken.get_encoding("gpt2")
    except Exception as error:  # noqa: BLE001 - any failure to get the files is the same missing data
        # A clause, not a whole line: the dataset that needs the tokenizer says what to do.
        raise DataUnavailable(f"the gpt2 tokenizer files are neither in tiktoken's cache ($TIKTOKEN_CACHE_DIR) nor "
                              f"downloadable ({cause_text(error, innermost=True)})") from error
