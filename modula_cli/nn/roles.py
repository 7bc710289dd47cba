"""Role naming (docs/design.md, "Modules"): the names that diagnostics, μP and the coordinate check give each
atom, the same at every width and depth, and display names of compounds."""

from __future__ import annotations

from .atom import Atom
from .module import Module


def with_role(atom: Atom, role: str) -> Atom:
    """Name an atom's job in its network (kept by every copy ``**`` makes); see ``layer_names``."""
    atom.role = role
    return atom


def layer_roles(module: Module) -> list[str]:
    """Each atom's role: the declared one, else its kind numbered among the undeclared atoms of its own
    copy, with one ``block.`` per enclosing ``**`` (``linear1``, ``block.linear1``, ``linear2``): copies of
    one block share their roles, and no layer outside the blocks shares one with a layer inside."""
    counts: dict[tuple, int] = {}
    roles = []
    for atom in module.atoms():
        if atom.role is not None:
            roles.append(atom.role)
            continue
        kind = type(atom).__name__.lower()
        counts[(kind, atom.repeat)] = counts.get((kind, atom.repeat), 0) + 1
        roles.append("block." * len(atom.repeat) + f"{kind}{counts[(kind, atom.repeat)]}")
    return roles


def layer_names(module: Module) -> list[str]:
    """One name per atom, in weight-list order, independent of width: its role and its copy indices
    (``attn.q[2]``: block 2; ``hidden[1.0]``: block 1, layer 0). Repeated names get ``#2``, ``#3``."""
    names, seen = [], {}
    for atom, role in zip(module.atoms(), layer_roles(module)):
        name = role + (f"[{'.'.join(map(str, atom.repeat))}]" if atom.repeat else "")
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return names


def named(module: Module, name: str) -> Module:
    """Give a compound a display name (shown by ``print``); composing it later keeps it as one node."""
    module.name = name
    return module
