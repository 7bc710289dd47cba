"""Atoms, norms, normalize / dualize / regularize / project against independent references."""

import math

import pytest
import torch

from modula_cli.nn import GPT, Conv2D, Embed, Linear, PowerIterationState, ResMLP, ResNet


def rms(x, dim=-1):
    return x.pow(2).mean(dim=dim).sqrt()


def svd_polar(G):
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return (U @ Vh).float()


@pytest.mark.parametrize("d_out, d_in", [(16, 8), (8, 16), (12, 12)])
def test_linear_init_and_norm(d_out, d_in):
    atom = Linear(d_out, d_in)
    (w,) = atom.initialize(3)
    assert torch.linalg.svdvals(w) == pytest.approx([math.sqrt(d_out / d_in)] * min(d_out, d_in), rel=1e-5)
    assert atom.norm([w]) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("d_out, d_in", [(16, 8), (8, 16)])
def test_linear_dualize_matches_svd_reference(d_out, d_in):
    atom = Linear(d_out, d_in)
    g = torch.randn(d_out, d_in)
    expected = 0.7 * math.sqrt(d_out / d_in) * svd_polar(g)
    assert torch.allclose(atom.dualize([g], 0.7, method="svd")[0], expected, atol=1e-5)
    assert torch.allclose(atom.dualize([g], 0.7)[0], expected, atol=2e-3)


def test_linear_normalize_by_hand():
    atom = Linear(6, 3)
    g = torch.randn(6, 3)
    sigma = torch.linalg.matrix_norm(g, ord=2)
    expected = 0.5 * g / (math.sqrt(3 / 6) * sigma)
    assert torch.allclose(atom.normalize([g], 0.5)[0], expected, atol=1e-6)


def test_embed_maps():
    atom = Embed(d_embed=8, num_embed=5)
    (w,) = atom.initialize(0)
    assert rms(w) == pytest.approx([1.0] * 5, rel=1e-5)
    g = torch.randn(5, 8)
    g[2] = 0
    for mapped in (atom.dualize([g], 0.3)[0], atom.normalize([g], 0.3)[0]):
        assert rms(mapped)[[0, 1, 3, 4]] == pytest.approx([0.3] * 4, rel=1e-5)
        assert torch.count_nonzero(mapped[2]) == 0
        # direction of each vector kept
        assert torch.allclose(mapped[0] / mapped[0].norm(), g[0] / g[0].norm(), atol=1e-6)
    assert atom.norm([g]) == pytest.approx(rms(g).max().item(), rel=1e-6)


def test_conv2d_init_norm_and_slicewise_dualize():
    atom = Conv2D(c_out=6, c_in=4, kernel_size=3)
    (w,) = atom.initialize(0)
    assert w.shape == (6, 4, 3, 3)
    for i in range(3):
        for j in range(3):
            expected = math.sqrt(6 / 4) / 9
            assert torch.linalg.svdvals(w[:, :, i, j]) == pytest.approx([expected] * 4, rel=1e-5)
    assert atom.norm([w]) == pytest.approx(1.0, rel=1e-5)
    g = torch.randn(6, 4, 3, 3)
    d = atom.dualize([g], 0.9, method="svd")[0]
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        ref = (0.9 / 9) * math.sqrt(6 / 4) * svd_polar(g[:, :, i, j])
        assert torch.allclose(d[:, :, i, j], ref, atol=1e-5)
    assert atom.norm([d]) == pytest.approx(0.9, rel=1e-5)
    # norm: k² · max_ij ||W_ij||_{rms→rms}
    slice_norms = [math.sqrt(4 / 6) * torch.linalg.matrix_norm(g[:, :, i, j], ord=2).item()
                   for i in range(3) for j in range(3)]
    assert atom.norm([g]) == pytest.approx(9 * max(slice_norms), rel=1e-5)


def test_atoms_are_well_normed_at_initialisation():
    torch.manual_seed(0)
    # Linear: RMS in, RMS out
    lin = Linear(32, 16)
    (w,) = lin.initialize(0)
    x = torch.randn(100, 16)
    x = x / rms(x).unsqueeze(-1)
    dw = 0.1 * torch.randn_like(w)
    assert (rms(lin(x, [w + dw]) - lin(x, [w])) <= lin.norm([dw]) * (1 + 1e-5)).all()
    dx = 0.1 * torch.randn_like(x)
    assert (rms(lin(x + dx, [w]) - lin(x, [w])) <= lin.sensitivity * rms(dx) * (1 + 1e-5)).all()
    # Embed: one-hot (ℓ1) in, RMS out; a change of index is an ℓ1 move of 2
    emb = Embed(16, 10)
    (e,) = emb.initialize(0)
    idx = torch.arange(10)
    de = 0.1 * torch.randn_like(e)
    assert (rms(emb(idx, [e + de]) - emb(idx, [e])) <= emb.norm([de]) * (1 + 1e-5)).all()
    moved = rms(emb(idx, [e]) - emb((idx + 1) % 10, [e]))
    assert (moved <= emb.sensitivity * 2 * (1 + 1e-5)).all()
    # Conv2D: max over pixels of channel-RMS, in and out
    conv = Conv2D(8, 4, 3)
    (k,) = conv.initialize(0)
    img = torch.randn(5, 4, 6, 6)
    img = img / rms(img, dim=1).amax(dim=(-2, -1)).view(5, 1, 1, 1)
    dk = 0.1 * torch.randn_like(k)
    out_change = rms(conv(img, [k + dk]) - conv(img, [k]), dim=1).amax(dim=(-2, -1))
    assert (out_change <= conv.norm([dk]) * (1 + 1e-5)).all()
    dimg = 0.1 * torch.randn_like(img)
    in_move = rms(dimg, dim=1).amax(dim=(-2, -1))
    out_move = rms(conv(img + dimg, [k]) - conv(img, [k]), dim=1).amax(dim=(-2, -1))
    assert (out_move <= conv.sensitivity * in_move * (1 + 1e-5)).all()


NETS = {
    "resmlp": lambda: ResMLP(width=16, depth=3, block_depth=2, input_dim=12, output_dim=5),
    "resnet": lambda: ResNet(width=8, depth=2, block_depth=2, in_channels=3, num_classes=4),
    "gpt": lambda: GPT(vocab_size=11, context=8, num_heads=2, width=8, depth=2),
}


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


def test_stacked_atoms_match_per_member_calls():
    g = torch.Generator().manual_seed(0)
    conv, linear, embed = Conv2D(5, 3), Linear(6, 4), Embed(4, 9)
    cases = [(conv, torch.randn(2, 7, 3, 5, 5, generator=g)), (linear, torch.randn(2, 7, 3, 4, generator=g)),
             (embed, torch.randint(0, 9, (2, 7, 3), generator=g))]
    for atom, x in cases:
        w = torch.stack([atom.init_weight(g) for _ in range(2)])
        out = atom(x, [w])
        for k in range(2):
            assert torch.allclose(out[k], atom(x[k], [w[k]]), atol=1e-6)


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
