"""μP's rule per layer (Tensor Programs V's Table 3, as ``mup.py`` tabulates it): a layer's fans, its kind
(hidden, input, readout, fixed) by which of them grow from the base network, and the initial scale, output
multiplier and LR factor that follow."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ...nn import Atom, Embed, MatrixAtom

READOUT_ROLE = "output"
QUERY_ROLE = "attn.q"
KINDS = ("hidden", "input", "readout", "fixed")


class MupError(ValueError):
    """A network that μP's rules do not cover; one line naming the layers."""


@dataclass(frozen=True)
class LayerRule:
    """One atom's μP multipliers, relative to the same atom in the base network."""

    kind: str            # hidden | input | readout | fixed
    fan_in_mult: float   # fan-in / base fan-in (1 when it does not grow)
    fan_out_mult: float
    lr: float            # × the run's LR for this atom's stored weight
    init: float          # × the atom's own initial effective weight
    output: float        # the forward multiplier (the atom's constant factor)
    eps: float = 1.0     # × optim.eps (Adam), set by a depth recipe (mup_depth.py)
    decay: float = 1.0   # × the weight decay's strength (LR × optim.wd), set by a depth recipe


@dataclass(frozen=True)
class MupParametrisation:
    """What ``Mup.network`` records on the network it prepares (``Module.set_parametrisation``): each atom's
    rule, in weight-list order, and the roles whose layers start at zero."""

    rules: tuple[LayerRule, ...]
    zero_roles: frozenset[str]

    @functools.cached_property  # asked every step: worked out once
    def eps_factors(self) -> tuple[float, ...] | None:
        """Each atom's factor on Adam's ε, or None where every one is 1 (no depth recipe)."""
        return None if all(rule.eps == 1 for rule in self.rules) else tuple(rule.eps for rule in self.rules)


def fans(atom: Atom) -> tuple[int, int]:
    """(fan-out, fan-in): a matrix's d_out, d_in (a convolution's channels); an embedding's width and table
    size (its input is one of ``num_embed`` indices)."""
    if isinstance(atom, MatrixAtom):
        return atom.d_out, atom.d_in
    if isinstance(atom, Embed):
        return atom.d_embed, atom.num_embed
    raise MupError(f"μP needs each layer's fan-in and fan-out; {atom.describe()} is neither a matrix nor an "
                   f"embedding (modula_cli.nn.MatrixAtom or Embed)")


def init_rms(atom: Atom) -> float:
    """The RMS entry of the atom's initial effective weight: exact for a Gaussian (its std), an orthogonal
    matrix (``polar_scale · sqrt(min(d_out, d_in) / (d_out · d_in))``, its Frobenius norm being fixed) and an
    embedding of unit rows (1)."""
    if getattr(atom, "init_std", None) is not None:
        return float(atom.init_std)
    if isinstance(atom, MatrixAtom):
        return atom.polar_scale * math.sqrt(min(atom.d_out, atom.d_in) / (atom.d_out * atom.d_in))
    if isinstance(atom, Embed):
        return 1.0
    raise MupError(f"μP cannot size the initialisation of {atom.describe()}")


def shape_rule(fan: tuple[int, int], base_fan: tuple[int, int], optimizer: str) -> tuple[str, float, float, float]:
    """(kind, m_in, m_out, LR multiplier) of a layer of (fan-out, fan-in) ``fan`` beside its base's (Tensor
    Programs V, Table 3; ``mup``'s MuAdam and MuSGD)."""
    (fan_out, fan_in), (base_out, base_in) = fan, base_fan
    m_out, m_in = fan_out / base_out, fan_in / base_in
    grows_out, grows_in = fan_out != base_out, fan_in != base_in
    kind = ("hidden" if grows_in and grows_out else "readout" if grows_in else "input" if grows_out else "fixed")
    width_mult = {"hidden": m_in, "readout": m_in, "input": m_out, "fixed": 1.0}[kind]
    if optimizer == "adam":  # entrywise-normalised steps: only a matrix both of whose sizes grow is slowed
        lr = 1 / m_in if kind == "hidden" else 1.0
    else:  # SGD: gradients already shrink with width, so vectors speed up
        lr = m_out / m_in if kind == "hidden" else width_mult
    return kind, m_in, m_out, lr


def layer_rule(atom: Atom, base: Atom, optimizer: str) -> LayerRule:
    """The rule of one atom from its shape and the base atom's."""
    kind, m_in, m_out, lr = shape_rule(fans(atom), fans(base), optimizer)
    init = {"hidden": m_in ** -0.5, "readout": 1 / m_in}.get(kind, 1.0) * init_rms(base) / init_rms(atom)
    return LayerRule(kind, m_in, m_out, lr, init, 1 / m_in if kind == "readout" else 1.0)


# the layers whose bias mup's set_base_shapes rescales (its nn.Linear and _ConvNd)
