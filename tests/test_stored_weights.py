"""Stored vs effective weights (docs/design.md, "Stored and effective weights").

An atom with ``forward_scale`` f stores W / f. Each map of the optimiser must give, on stored weights, the
stored form of what it gives on the effective weights of an atom with f = 1. Every map is checked on its own:
under the modular variant (f = 1 everywhere) a map that forgets the conversion is invisible.
"""

import inspect

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from modula_cli.nn import Conv2D, Embed, Linear, Module, PowerIterationState
from modula_cli.nn.manifold import DualAscent, ManifoldState

FACTORS = (2.5, 0.4, 3.0)  # distinct per atom, so a map that swaps or drops a factor shows


def _text_net() -> Module:
    embed = Embed(8, 10, mass=0.5)
    embed.renormalize_each_step = True  # the paper variant's embedding: ``renormalized`` has work to do
    return Linear(5, 6, mass=2.0) @ Linear(6, 8) @ embed


def _image_net() -> Module:
    return Conv2D(4, 3, mass=1.5) @ Conv2D(3, 3) @ Conv2D(3, 2, kernel_size=1, padding=0)


def _pair(build) -> tuple[Module, Module, list[float]]:
    """The same network twice: every forward factor 1, and every forward factor non-unit."""
    unit, scaled = build(), build()
    for atom, factor in zip(scaled.atoms(), FACTORS, strict=True):
        atom.forward_scale = factor
    return unit, scaled, list(FACTORS)


def _random(net: Module, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(w.shape, generator=generator) for w in net.initialize(0)]


def _on_manifold(net: Module, seed: int) -> list[torch.Tensor]:
    return net.onto_manifold(_random(net, seed))  # unit net: stored = effective


def _manifold_update(kinds: list[str]):
    def run(net, w, u):
        state = ManifoldState()
        return net.manifold_update(w, u, 0.3, DualAscent(iterations=3), state, kinds,
                                   {"method": "polar_express", "steps": None})
    return run


# name: (the map it exercises, needs weights on the manifold, call(net, stored w, direction u))
CASES = {
    "dualize": ("dualize", False, lambda net, w, u: net.dualize(u, 0.7)),
    "normalize_exact": ("normalize", False, lambda net, w, u: net.normalize(u, 0.7)),
    "normalize_power": ("normalize", False,
                        lambda net, w, u: net.normalize(u, 0.7, state=PowerIterationState(2, seed=3))),
    "manifold_fixed": ("manifold_update", True, _manifold_update(["fixed"] * 3)),
    "manifold_scaled": ("manifold_update", True, _manifold_update(["scaled"] * 3)),
    "manifold_free": ("manifold_update", True, _manifold_update(["free", "scaled", "fixed"])),
    "onto_manifold": ("onto_manifold", False, lambda net, w, u: net.onto_manifold(w)),
    "regularize": ("regularize", False, lambda net, w, u: net.regularize(w, 0.3)),
    "renormalized": ("renormalized", False, lambda net, w, u: net.renormalized(w)),
    "project": ("project", False, lambda net, w, u: net.project(w)),
    "initialize": ("initialize", False, lambda net, w, u: net.initialize(7)),
}


def _as_list(result, n: int) -> list[torch.Tensor | None]:
    if isinstance(result, dict):
        return [result.get(i) for i in range(n)]
    return list(result)


@pytest.mark.parametrize("build", [_text_net, _image_net], ids=["linear_embed", "conv"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_map_on_stored_weights_is_the_map_on_effective_ones(case, build):
    _, needs_manifold, call = CASES[case]
    unit, scaled, factors = _pair(build)
    effective = _on_manifold(unit, 1) if needs_manifold else _random(unit, 1)
    direction = _random(unit, 2)
    stored = [w / f for w, f in zip(effective, factors)]
    # a gradient with respect to the stored weight is f times the effective one's
    stored_direction = [g * f for g, f in zip(direction, factors)]

    expected = _as_list(call(unit, effective, direction), len(factors))
    got = _as_list(call(scaled, stored, stored_direction), len(factors))

    assert [e is None for e in expected] == [g is None for g in got]
    for index, (e, g, f) in enumerate(zip(expected, got, factors)):
        if e is not None:
            # float32 rounding of W / f · f, amplified where a small change is a difference of weights (the
            # manifold steps); a forgotten conversion is off by a factor f, far outside this
            torch.testing.assert_close(g * f, e, rtol=1e-4, atol=1e-3 * float(e.abs().max()),
                                       msg=f"{case}: atom {index}")


# Public methods that take weights or directions but are not maps of the optimiser, and why.
NOT_MAPS = {
    "forward": "the function itself: the atom multiplies its weight (or its output) by the forward factor",
    "__call__": "forward",
    "norm": "a diagnostic: Atom.norm measures the effective weight",
}


def test_every_map_on_weights_has_a_case():
    """A new method of Module that takes weights or directions is a map of the optimiser, so it must convert
    between stored and effective weights: it gets a case above (or is named in NOT_MAPS with a reason)."""
    taking_weights = {name for name, member in inspect.getmembers(Module, inspect.isfunction)
                      if {"w", "u", "g"} & set(inspect.signature(member).parameters)}
    maps = taking_weights - set(NOT_MAPS) | {"initialize"}  # initialize makes weights rather than taking them
    assert {target for target, _, _ in CASES.values()} == maps


def test_the_paper_embedding_is_renormalised_to_unit_rows_in_the_forward_pass():
    """Hand check of one map: rows at RMS 1 effective, so RMS 1 / f as stored."""
    _, scaled, factors = _pair(_text_net)
    stored = _random(scaled, 4)
    renormalized = scaled.renormalized(stored)
    assert list(renormalized) == [0]  # the embedding is applied first, so it is atom 0
    row_rms = renormalized[0].pow(2).mean(dim=-1).sqrt()
    torch.testing.assert_close(row_rms, torch.full_like(row_rms, 1 / factors[0]))


def _inputs(net: Module, kind: str, members: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    lead = (members,) if members else ()
    if kind == "linear_embed":
        return torch.randint(0, 10, (*lead, 4, 3), generator=generator)
    return torch.randn(*lead, 2, 2, 5, 5, generator=generator)


@pytest.mark.parametrize("members", [0, 3], ids=["single", "packed"])
@pytest.mark.parametrize("build", [_text_net, _image_net], ids=["linear_embed", "conv"])
@pytest.mark.parametrize("on_weight", [True, False], ids=["factor_on_weight", "factor_on_output"])
def test_the_forward_pass_on_stored_weights_is_the_function_of_the_effective_ones(build, on_weight, members,
                                                                                 monkeypatch):
    """Wherever the atom puts its factor (the weight, or the output when the weight is the larger), the stored
    weights compute what the effective ones compute with every factor 1."""
    unit, scaled, factors = _pair(build)
    for atom in scaled.atoms():
        monkeypatch.setattr(atom, "factor_on_weight", lambda x, weight: on_weight)
    effective = _random(unit, 1)
    if members:
        effective = [torch.stack([w * (1 + 0.1 * k) for k in range(members)]) for w in effective]
    stored = [w / f for w, f in zip(effective, factors)]
    x = _inputs(unit, "linear_embed" if build is _text_net else "conv", members)
    expected = unit(x, effective)  # float32 rounding only: a misplaced factor is off by 0.4–3×
    torch.testing.assert_close(scaled(x, stored), expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))


def test_the_factor_goes_on_the_smaller_of_weight_and_output():
    linear, embed, readout = Linear(6, 8), Embed(8, 1000), Linear(1000, 8)
    assert linear.factor_on_weight(torch.zeros(8, 8), torch.zeros(6, 8))  # 48 weights, 48 outputs
    assert not linear.factor_on_weight(torch.zeros(7, 8), torch.zeros(6, 8))  # 48 weights, 42 outputs
    # a large vocabulary's readout: 8 000 weights against 1 000 logits per token
    assert readout.factor_on_weight(torch.zeros(8, 8), torch.zeros(1000, 8))
    assert not readout.factor_on_weight(torch.zeros(7, 8), torch.zeros(1000, 8))
    conv = Conv2D(4, 2)  # 4·2·9 = 72 weights; 4 output channels per 2 input channels
    assert conv.factor_on_weight(torch.zeros(1, 2, 6, 6), torch.zeros(4, 2, 3, 3))  # 144 outputs
    assert not conv.factor_on_weight(torch.zeros(1, 2, 3, 3), torch.zeros(4, 2, 3, 3))  # 36 outputs
    # a lookup: 8 000 table entries against 8 numbers per index
    assert not embed.factor_on_weight(torch.zeros(4, 100, dtype=torch.long), torch.zeros(1000, 8))
    assert embed.factor_on_weight(torch.zeros(4, 250, dtype=torch.long), torch.zeros(1000, 8))
    assert not embed.factor_on_weight(torch.zeros(4, 249, dtype=torch.long), torch.zeros(1000, 8))


class _ActivationSizedProducts(TorchDispatchMode):
    """Counts the multiplications and divisions whose result is at least ``size`` numbers."""

    def __init__(self, size: int):
        super().__init__()
        self.size, self.count = size, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mul, torch.ops.aten.div) and out.numel() >= self.size:
            self.count += 1
        return out


def test_the_paper_variant_adds_no_product_of_activations():
    """The paper variant's factors cost a product of the weights, not of a batch's activations (they took 4 % of
    a GPT step on a CPU when they scaled the outputs), and its 1/3 on each of q, k and v costs what the modular
    1/3 on the attention's output costs (as three products of q, k and v it took another 1–2 %)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from modula_cli.models import build_model
    from modula_cli.models.variant import VARIANTS
    from modula_cli.nn.loss import grads_of, losses_and_hits

    depth, width, batch, context = 2, 32, 32, 16
    data = SimpleNamespace(kind="language", name="shakespeare", vocab_size=65, context=context)
    arch = OmegaConf.create({"name": "gpt", "width": width, "depth": depth, "heads": 4, "blocks_mass": 5.0})
    generator = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 65, (batch, context), generator=generator) for _ in range(2))
    counts = {}
    for name in ("modular", "paper"):
        net = build_model(arch, data, VARIANTS[name])
        weights = [w.requires_grad_() for w in net.initialize(0)]
        # every weight (at most 4 width² = 4 096 numbers) is below one q, k or v (16 384 numbers)
        with _ActivationSizedProducts(batch * context * width) as products:
            grads_of(losses_and_hits(net, weights, x, y, None)[0], weights)
        counts[name] = products.count
    assert counts["modular"] > 0
    assert counts["paper"] == counts["modular"]
