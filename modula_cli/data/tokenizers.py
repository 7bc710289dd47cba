"""Tokenizers for the language datasets: GPT-2 BPE (tiktoken) and an offline byte-level encoding."""

from __future__ import annotations

import tiktoken

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
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as error:  # tiktoken downloads its BPE files on first use
            raise RuntimeError(
                "the gpt2 tokenizer files could not be loaded (tiktoken fetches them on first use and caches "
                "them in $TIKTOKEN_CACHE_DIR). Run once with internet access, copy a tiktoken cache into "
                f"$TIKTOKEN_CACHE_DIR, or use data.tokenizer=byte for offline runs. Cause: {error}"
            ) from error
    raise ValueError(f"unknown tokenizer {name!r}; allowed: {', '.join(TOKENIZERS)}")
