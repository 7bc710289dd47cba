"""``train.compile``: the optimiser update of every mode compiled gives eager's weights and compiles once; a
function that fails to compile runs eagerly from where it was, with one line naming it (modula_cli/run/compiled.py)."""

import logging

import pytest
import torch
from omegaconf import OmegaConf

from helpers import optim_config
from modula_cli.config import CONFIG_DIR
from modula_cli.models.variant import VARIANTS
from modula_cli.optim import MODES, init_state, optimizer_step
from modula_cli.optim.modes import build_network
from modula_cli.optim.step import apply_update, update_restore_point
from modula_cli.run.compiled import Compiled

# every matrix 8 × 8: one shape, so the CPU compiler builds each kernel once (cold, the manifold update took 66 s
# to compile with three shapes)
IMAGE = OmegaConf.create({"name": "cifar10", "kind": "image", "input_shape": [2, 2, 2], "num_classes": 8})
LRS = [0.05, 0.1, 0.2]


def resmlp(**sizes):
    return OmegaConf.merge(OmegaConf.load(CONFIG_DIR / "arch" / "resmlp.yaml"), {"width": 8, "depth": 2, **sizes})


def packed_run(mode: str, update, steps: int = 8) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Weights after ``steps`` updates of a packed ResMLP (3 LRs, the middle one frozen, weight decay where the
    mode has it) on fixed random gradients, and the initial weights."""
    arch = resmlp()
    cfg = optim_config(name="adam", mode=mode, lr=LRS, wd=0.0 if mode == "manifold" else 0.01, mup_base_width=4)
    net = build_network(arch, IMAGE, VARIANTS["paper"], cfg)
    initial = MODES[mode].initial_weights(net, net.initialize(0))
    weights = [w.unsqueeze(0).repeat(3, *([1] * w.ndim)) for w in initial]
    generator = torch.Generator().manual_seed(0)
    grads = [[torch.randn(w.shape, generator=generator) for w in weights] for _ in range(steps)]
    state = init_state(weights, cfg, members=3)
    base_lr, active = torch.tensor(LRS), torch.tensor([True, False, True])
    for t, g in enumerate(grads):
        with torch.compiler.set_stance("fail_on_recompile" if update is not None and t >= 3 else "default"):
            optimizer_step(net, weights, g, state, cfg, t, steps, base_lr=base_lr, active=active, update=update)
    return weights, initial


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_modes_compiled_update_gives_eagers_weights_and_compiles_once(mode, caplog):
    torch.compiler.reset()
    compiled = Compiled(apply_update, f"the optim.mode={mode} update", update_restore_point)
    with caplog.at_level(logging.INFO, logger="modula_cli.run.compiled"):
        weights, initial = packed_run(mode, compiled)
    assert not compiled.eager, caplog.text  # compiled, not fallen back
    assert "compiled in its first call" in caplog.text
    for eager, compiled_weight, start in zip(packed_run(mode, None)[0], weights, initial, strict=True):
        torch.testing.assert_close(compiled_weight, eager, atol=2e-5, rtol=1e-4)
        assert not torch.equal(compiled_weight[0], start)
        assert torch.equal(compiled_weight[1], start)  # frozen: no step and no weight decay


def test_a_function_that_fails_to_compile_runs_eagerly_from_where_it_was(caplog):
    """The compiled call changes the state, then fails (as a compiled update can, part-way through its graphs): the
    state is put back, the eager function runs once from there, and one line names what failed."""
    counter = torch.zeros(())

    def step(x):
        counter.add_(1.0)
        return x + counter

    def breaks_part_way(x):
        counter.add_(100.0)
        raise RuntimeError("KeyError: 'buf319'\nmore lines the user need not read")

    compiled = Compiled(step, "the optim.mode=manifold update", lambda args: _restores(counter))
    compiled.compiled = breaks_part_way
    with caplog.at_level(logging.INFO, logger="modula_cli.run.compiled"):
        assert compiled(torch.tensor(1.0)).item() == 2.0  # 1 + 1: the failed call's 100 was put back
        assert compiled(torch.tensor(1.0)).item() == 3.0  # eager from then on
    assert compiled.eager
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["train.compile: torch.compile failed on the optim.mode=manifold update (RuntimeError: "
                     "KeyError: 'buf319'); it runs eagerly"]


def _restores(counter: torch.Tensor):
    saved = counter.clone()
    return lambda: counter.copy_(saved)


def test_the_restore_point_puts_back_the_weights_and_the_state_an_update_changed():
    arch = resmlp()
    cfg = optim_config(name="adam", mode="normed", lr=0.1)
    net = build_network(arch, IMAGE, VARIANTS["paper"], cfg)
    weights = net.initialize(0)
    state = init_state(weights, cfg)
    grads = [torch.ones_like(w) for w in weights]
    optimizer_step(net, weights, grads, state, cfg, 0, 4)
    before = [w.clone() for w in weights], [m.clone() for m in state.momentum], dict(state.mode_state.vectors)
    restore = update_restore_point((net, weights, grads, state, cfg, 0.1, None))
    optimizer_step(net, weights, [2 * g for g in grads], state, cfg, 1, 4)
    assert not torch.equal(weights[0], before[0][0])
    restore()
    for now, then in zip(weights + state.momentum, before[0] + before[1], strict=True):
        assert torch.equal(now, then)
    assert all(torch.equal(state.mode_state.vectors[i], v) for i, v in before[2].items())
