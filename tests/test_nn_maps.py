"""A network's maps (normalize, dualize, regularize, project) on whole networks: they hit their target norms, a zero
gradient stays zero, and packed networks match separate ones; and the power iteration behind the spectral norms
(modula_cli/nn/spectral.py): warm starts, seeded unit start vectors, grouped matrices, state that moves between
devices."""

from __future__ import annotations

import pytest
import torch

from modula_cli.nn import GPT, PowerIterationState, ResMLP, ResNet


NETS = {
    "resmlp": lambda: ResMLP(width=16, depth=3, block_depth=2, input_dim=12, output_dim=5),
    "resnet": lambda: ResNet(width=8, depth=2, block_depth=2, in_channels=3, num_classes=4),
    "gpt": lambda: GPT(vocab_size=11, context=8, num_heads=2, width=8, depth=2),
}


# --- normalize, dualize, regularize and project on whole networks --------------------------------------------------


@pytest.mark.parametrize("name", NETS)
@pytest.mark.parametrize("tau", [0.05, 1.0, 3.0])
def test_normalize_and_dualize_hit_the_target_norm(name, tau):
    net = NETS[name]()
    g = [torch.randn_like(t) for t in net.initialize(0)]
    assert net.norm(net.normalize(g, tau)) == pytest.approx(tau, rel=1e-5)
    assert net.norm(net.dualize(g, tau, method="svd")) == pytest.approx(tau, rel=1e-5)
    assert net.norm(net.dualize(g, tau)) == pytest.approx(tau, rel=2e-3)


def test_zero_gradient_stays_zero():
    net = NETS["gpt"]()
    zeros = [torch.zeros_like(t) for t in net.initialize(0)]
    for mapped in (net.normalize(zeros, 1.0), net.dualize(zeros, 1.0),
                   net.normalize(zeros, 1.0, state=PowerIterationState())):
        assert all(torch.count_nonzero(t) == 0 and torch.isfinite(t).all() for t in mapped)


def test_regularize_and_project():
    net = NETS["resmlp"]()
    w = net.initialize(0)
    shares = net.target_shares()
    decayed = net.regularize(w, 0.3)
    for before, after, share in zip(w, decayed, shares):
        assert torch.allclose(after, before * (1 - 0.3 * share))
    drifted = [t + 0.5 * torch.randn_like(t) for t in w]
    projected = net.project(drifted)
    assert all(a.norm([p]) == pytest.approx(1.0, rel=2e-3) for a, p in zip(net.atoms(), projected))


# --- packed networks -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NETS)
def test_stacked_networks_match_separate_calls(name):
    """A leading axis of K networks with per-network targets equals K separate calls (packed sweeps)."""
    net = NETS[name]()
    targets = torch.tensor([0.1, 0.5, 2.0])
    grads = [[torch.randn_like(t) for t in net.initialize(0)] for _ in targets]
    stacked = [torch.stack(pieces) for pieces in zip(*grads)]
    state, states = PowerIterationState(), [PowerIterationState() for _ in targets]
    for _ in range(2):  # the second call uses warm-started vectors
        packed_normed = net.normalize(stacked, targets, state=state)
        separate = [net.normalize(g, float(t), state=s) for g, t, s in zip(grads, targets, states)]
    for k in range(len(targets)):
        assert all(torch.allclose(p[k], s, atol=1e-5, rtol=1e-4) for p, s in zip(packed_normed, separate[k]))
    packed_dual = net.dualize(stacked, targets, method="svd")
    packed_decay = net.regularize(stacked, targets)
    for k, t in enumerate(targets):
        assert all(torch.allclose(p[k], s, atol=1e-5)
                   for p, s in zip(packed_dual, net.dualize(grads[k], float(t), method="svd")))
        assert all(torch.allclose(p[k], s) for p, s in zip(packed_decay, net.regularize(grads[k], float(t))))
        assert net.norm([p[k] for p in packed_dual]) == pytest.approx(float(t), rel=1e-5)


NET_INPUTS = {
    "resmlp": lambda g: torch.randn(3, 3, 2, 2, generator=g),
    "resnet": lambda g: torch.randn(3, 3, 6, 6, generator=g),
    "gpt": lambda g: torch.randint(0, 11, (3, 8), generator=g),
}


@pytest.mark.parametrize("name", NETS)
def test_stacked_forward_matches_separate_forwards(name):
    """K networks with weights on a leading member axis, applied to the shared batch with that axis added
    (a view), give each network's own output. K equals the batch size here, so a member axis mistaken for
    the batch axis would still broadcast and only the values would catch it."""
    net = NETS[name]()
    x = NET_INPUTS[name](torch.Generator().manual_seed(0))
    members = [net.initialize(seed) for seed in (1, 2, 3)]
    stacked = [torch.stack(pieces) for pieces in zip(*members)]
    out = net(x.expand(3, *x.shape), stacked)
    for k, w in enumerate(members):
        assert torch.allclose(out[k], net(x, w), atol=1e-5, rtol=1e-4)


# --- the power iteration's state -----------------------------------------------------------------------------------


def test_power_iteration_state_converges_when_warm_started():
    net = NETS["resmlp"]()
    generator = torch.Generator().manual_seed(1)
    g = [torch.randn(t.shape, generator=generator) for t in net.initialize(0)]
    state = PowerIterationState(iterations=2)
    norms = [net.norm(net.normalize(g, 1.0, state=state)) for _ in range(40)]
    # Power iteration underestimates σ, so updates overshoot, less with every warm-started call. Random
    # 16 × 16 matrices have close top singular values, hence the slow convergence (1.0048 after 12 calls).
    assert norms[0] >= 1.0 and all(a >= b - 1e-6 for a, b in zip(norms, norms[1:]))
    assert norms[-1] == pytest.approx(1.0, rel=1e-3)
    restored = PowerIterationState()
    restored.load_state_dict(state.state_dict())
    assert all(torch.equal(state.vectors[i], restored.vectors[i]) for i in state.vectors)


def test_grouped_power_iteration_equals_one_matrix_at_a_time():
    """Same-shape matrices iterate together, each with its own vector: the estimates, and the vectors
    carried to the next step, equal iterating every matrix on its own."""
    g = torch.Generator().manual_seed(0)
    matrices = {0: torch.randn(6, 4, generator=g), 1: torch.randn(6, 4, generator=g) * 5,
                2: torch.randn(9, 3, 5, generator=g), 3: torch.randn(6, 4, generator=g)}
    together, alone = PowerIterationState(iterations=3), PowerIterationState(iterations=3)
    for _ in range(2):
        grouped = together.spectral_norms(matrices)
        single = {i: alone.spectral_norms({i: m})[i] for i, m in matrices.items()}
    for i in matrices:
        assert torch.allclose(grouped[i], single[i], rtol=1e-5)
        assert torch.allclose(together.vectors[i], alone.vectors[i], atol=1e-5)
    assert float(grouped[1]) == pytest.approx(float(torch.linalg.matrix_norm(matrices[1], ord=2)), rel=0.05)


def test_power_iteration_state_round_trips_onto_another_device():
    state = PowerIterationState(iterations=3, seed=7)
    state.spectral_norms({2: torch.randn(4, 3)})
    fresh = PowerIterationState()
    fresh.load_state_dict(state.state_dict(), "meta")
    assert (fresh.iterations, fresh.seed) == (3, 7)
    assert list(fresh.vectors) == [2] and fresh.vectors[2].device.type == "meta"
    assert fresh.vectors[2].shape == (3,)
    with pytest.raises(ValueError, match="^power iteration needs at least 1 iteration, got 0$"):
        PowerIterationState(iterations=0)


def test_power_iteration_starts_from_seeded_unit_vectors_and_keeps_them_unit():
    state = PowerIterationState()
    assert (state.iterations, state.seed) == (2, 0)  # two warm-started steps; start vectors seeded per atom
    small = 0.01 * torch.eye(3)[:2]  # σ = 0.01: the kept vector must still be a unit vector
    sigmas = state.spectral_norms({0: small, 5: torch.randn(2, 3, generator=torch.Generator().manual_seed(1))})
    assert float(sigmas[0]) == pytest.approx(0.01, rel=1e-4)
    for index in (0, 5):
        assert float(state.vectors[index].norm()) == pytest.approx(1.0, rel=1e-5)
    fresh = PowerIterationState(iterations=1, seed=3)
    fresh.spectral_norms({2: torch.eye(4)})  # one step from the start vector: A = I keeps it
    start = torch.randn(4, generator=torch.Generator().manual_seed(3 + 2))
    assert torch.allclose(fresh.vectors[2], start / start.norm(), atol=1e-6)


def test_a_kept_vector_on_another_device_is_drawn_again():
    state = PowerIterationState()
    state.vectors[0] = torch.ones(3, device="meta")
    matrix = torch.diag(torch.tensor([3.0, 1.0, 0.5]))
    assert float(state.spectral_norms({0: matrix})[0]) == pytest.approx(3.0, rel=1e-2)
    assert state.vectors[0].device.type == "cpu"


# --- the maps' contracts, exactly (written against the survivors of the mutation pass after the restructuring) ------

def test_every_map_takes_one_tensor_per_atom_and_says_so():
    """A list one tensor short is an error, never a silent truncation to the shorter list."""
    from modula_cli.nn import Linear
    from modula_cli.nn.weight_maps import effective_weights, stored_weights

    net = Linear(4, 8) @ Linear(8, 3)
    w = net.initialize(seed=0)
    short = w[:1]
    for call in (lambda: effective_weights(net.atom_list(), short), lambda: stored_weights(net.atom_list(), short),
                 lambda: net.regularize(short, 0.1), lambda: net.project(short)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError, match=r"^normalize: expected 2 update tensors, got 1$"):
        net.normalize(short)


def test_the_maps_default_target_is_a_unit_modular_norm():
    from modula_cli.nn import Linear

    net = Linear(4, 8) @ Linear(8, 3)
    shapes = [w.shape for w in net.initialize(seed=0)]
    g = [torch.randn(*shape, generator=torch.Generator().manual_seed(i)) for i, shape in enumerate(shapes)]
    assert net.norm(net.normalize(g)) == pytest.approx(1.0, rel=1e-4)
    assert net.norm(net.dualize(g, method="svd")) == pytest.approx(1.0, rel=1e-4)
    assert net.norm(net.normalize(g, 0.25)) == pytest.approx(0.25, rel=1e-4)


def test_an_atoms_mass_and_sensitivity_default_to_one():
    from modula_cli.nn.atom import Atom

    class Gain(Atom):
        def forward(self, x, w):
            return x

    atom = Gain()
    assert (atom.mass, atom.sensitivity) == (1.0, 1.0)
