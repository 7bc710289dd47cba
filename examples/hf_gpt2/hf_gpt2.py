"""Hugging Face ``transformers``' GPT-2, built from a ``GPT2Config`` (no pretrained weights, no download), for
modula-sweep as it is. Needs ``pip install transformers`` (or ``pip install -e ".[hf]"``).

The model returns an output object; modula-sweep reads its ``.logits``. GPT-2 ties its token embedding to its
readout; μP needs them apart (``tie: false``, the default here), Muon and unnormed take either.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel


def hf_gpt2(arch: Any, data: Any) -> nn.Module:
    """GPT-2 of ``arch.width`` (n_embd), ``arch.depth`` (n_layer) and heads of ``arch.head_dim``, for language data
    (``data.vocab_size`` tokens, ``data.context`` positions), dropout off."""
    config = GPT2Config(vocab_size=data.vocab_size, n_positions=data.context, n_embd=arch.width, n_layer=arch.depth,
                        n_head=arch.width // arch.head_dim, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        tie_word_embeddings=arch.tie, use_cache=False,
                        bos_token_id=data.vocab_size - 1, eos_token_id=data.vocab_size - 1)
    return GPT2LMHeadModel(config)
