"""The builder of nanoGPT's model (``model.py`` beside it, unedited): the arch config's keys as its GPTConfig.
The width grows the heads in number at a fixed head size, as μP and the modular norm's sweeps expect."""

from model import GPT, GPTConfig


def nanogpt(arch, data):
    return GPT(GPTConfig(block_size=data.context, vocab_size=data.vocab_size, n_layer=arch.depth,
                         n_head=arch.width // arch.head_dim, n_embd=arch.width, dropout=arch.dropout, bias=arch.bias))
