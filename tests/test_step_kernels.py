"""The optimiser update in few kernels: what one update launches, counted with torch.profiler on the CPU (the
operators a GPU would launch, modula_cli/optim/kernels.py), must not grow with depth in any mode, and no update
may wait for the device (docs/performance.md, "The step's operations")."""

import pytest
import torch
from omegaconf import OmegaConf

from helpers import optim_config
from modula_cli.models.variant import VARIANTS
from modula_cli.nn.loss import grads_of, losses_and_hits
from modula_cli.optim import MODES, init_state, optimizer_step
from modula_cli.optim.kernels import Launches, count_launches
from modula_cli.optim.modes import build_network

LANGUAGE = OmegaConf.create({"name": "shakespeare", "kind": "language", "vocab_size": 65, "context": 8})
# what a deeper GPT may add to an update: a constant, never one launch per layer (6 weights a block)
GROWTH_ALLOWED = 3


def update_launches(mode: str, depth: int, optimizer: str = "adam", variant: str = "paper", pack: int = 0,
                    **settings) -> tuple[Launches, int]:
    """The launches of a GPT's third update (the first two warm the state) and its number of weight tensors."""
    arch = OmegaConf.create({"name": "gpt", "width": 16, "depth": depth, "heads": 2, "blocks_mass": 5.0})
    cfg = optim_config(name=optimizer, mode=mode, lr=[0.01, 0.02, 0.04][:pack] if pack else 0.01,
                       schedule="constant", mup_base_width=8, **settings)
    net = build_network(arch, LANGUAGE, VARIANTS[variant], cfg)
    weights = MODES[mode].initial_weights(net, net.initialize(0))
    if pack:
        weights = [w.unsqueeze(0).repeat(pack, *([1] * w.ndim)) for w in weights]
    weights = [w.requires_grad_() for w in weights]
    state = init_state(weights, cfg, members=pack or 1)
    base_lr = torch.tensor(cfg.lr) if pack else None
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 65, (4, 8), generator=generator)
    y = torch.randint(0, 65, (4, 8), generator=generator)
    if pack:
        x, y = x.expand(pack, *x.shape), y.expand(pack, *y.shape)

    def grads():
        return grads_of(losses_and_hits(net, weights, x, y, pack or None)[0], weights)

    for t in range(2):
        optimizer_step(net, weights, grads(), state, cfg, t, 100, base_lr=base_lr)
    g = grads()
    return count_launches(lambda: optimizer_step(net, weights, g, state, cfg, 2, 100, base_lr=base_lr)), len(weights)


def assert_flat(mode: str, **settings) -> None:
    (shallow, few), (deep, many) = update_launches(mode, 2, **settings), update_launches(mode, 8, **settings)
    assert many - few == 36  # 6 more blocks of 6 weight tensors: the counts below would show one per weight
    grown = deep.total - shallow.total
    assert grown <= GROWTH_ALLOWED, (f"{mode}: {shallow.total} launches at depth 2, {deep.total} at depth 8; "
                                     f"added: {dict(deep.kernels - shallow.kernels)}")
    assert not shallow.host_syncs and not deep.host_syncs, f"{mode} waits for the device: {dict(deep.host_syncs)}"


@pytest.mark.parametrize("variant", ["paper", "modular"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_an_updates_launches_do_not_grow_with_depth_in_any_mode(mode, variant):
    assert_flat(mode, variant=variant)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_packed_members_sgd_and_clipping_add_no_launch_per_layer(mode):
    assert_flat(mode, optimizer="sgd", pack=3, grad_clip=1.0)


@pytest.mark.parametrize("mode", sorted(set(MODES) - {"manifold"}))  # manifold holds its norms: no decay
def test_weight_decay_adds_no_launch_per_layer(mode):
    assert_flat(mode, wd=0.1, eps=1e-8)


def test_manifold_dual_ascent_and_its_kinds_add_no_launch_per_layer():
    assert_flat("manifold", manifold_iterations=3, manifold_scaled=["hidden"], manifold_free=["output"])


def test_the_count_sees_launches_and_host_syncs_and_passes_over_views():
    a, b = torch.ones(4, 3), torch.ones(4, 3)
    counted = count_launches(lambda: (a + b, a.view(12).reshape(3, 4).mT, torch._foreach_add([a, b, a], 1.0)))
    assert counted.total == 2 and counted.kernels == {"aten::add": 1, "aten::_foreach_add": 1}
    assert not counted.host_syncs
    assert count_launches(lambda: float((a * b).sum())).host_syncs["aten::_local_scalar_dense"] == 1
    assert count_launches(lambda: bool((a > 0).any())).host_syncs


def test_the_adam_step_reads_nothing_back_while_lerp_with_a_device_weight_does():
    """Why ``directions.ema_`` is not ``_foreach_lerp_``: that reads a tensor weight back to the host each call."""
    averages, values, weight = [torch.zeros(3)], [torch.ones(3)], torch.tensor(0.1)
    assert count_launches(lambda: torch._foreach_lerp_(averages, values, weight)).host_syncs
    from modula_cli.optim.directions import ema_

    expected = torch.lerp(averages[0], values[0], 0.1)
    assert not count_launches(lambda: ema_(averages, values, weight)).host_syncs
    torch.testing.assert_close(averages[0], expected)
