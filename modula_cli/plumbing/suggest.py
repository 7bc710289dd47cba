"""A suggestion ("did you mean …?") for a key that is not in the config: one wording for a mistyped
``train.stepz=5`` (the command line's front door) and an added ``+train.stepz=5`` (the config checks). Only
difflib here, so the front door answers before torch is imported."""

from __future__ import annotations

import difflib

from omegaconf import DictConfig


def unknown_key(key: str, cfg: DictConfig, added: bool = False) -> str:
    """``train.stepz`` -> "unknown key train.stepz; did you mean train.steps?", matched among the keys beside
    the first unknown part (at the top, also among the groups' keys: ``stepz`` -> train.steps); else the keys
    there. ``added``: the key is in ``cfg`` because ``+key=…`` put it there (it is not offered as its own
    guess)."""
    parts, node, depth = key.split("."), cfg, 0
    while depth < len(parts) - 1 and isinstance(node.get(parts[depth]), DictConfig):
        node, depth = node[parts[depth]], depth + 1
    known = [str(k) for k in node.keys() if not (added and depth == len(parts) - 1 and str(k) == parts[depth])]
    if not known or parts[depth] in known:  # a value where keys were expected: nothing to suggest
        return f"unknown key {key}"
    below = {f"{k}.{child}": str(child) for k in known if depth == 0 and isinstance(node[k], DictConfig)
             for child in node[k]}
    by_name = {**{name: path for path, name in below.items()}, **{k: k for k in known}}
    guess = difflib.get_close_matches(parts[depth], list(by_name), n=1)
    if guess:
        return f"unknown key {key}; did you mean {'.'.join([*parts[:depth], by_name[guess[0]], *parts[depth + 1:]])}?"
    where = ".".join(parts[:depth])
    return f"unknown key {key}; known{f' in {where}' if where else ''}: {', '.join(known)}"
