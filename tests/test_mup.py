"""μP (optim.mode=mup) against the reference implementation, microsoft/mup: the same layer shapes as torch
layers, ``set_base_shapes`` + ``MuAdam`` / ``MuSGD``, and every layer's learning rate, initial scale, output
multiplier and first step compared with ours; then the rules by hand, the refusals and the coordinate check."""

import math
from types import SimpleNamespace

import mup
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from modula_cli.config.identity import fingerprint
from modula_cli.config.validate import config_problems
from modula_cli.models import ModelError, build_model
from modula_cli.models.variant import VARIANTS
from modula_cli.nn import Conv2D, Embed, Flatten, FunctionalAttention, Linear, ReLU, layer_roles, with_role
from modula_cli.optim import MODES, build_network, init_state, optimizer_step
from modula_cli.optim.modes.mup import modules, refuse_stray_readouts, rules_of
from modula_cli.optim.modes.mup_rules import LayerRule, MupError, fans, init_rms, layer_rule

from helpers import compose_config, optim_config

LANGUAGE = OmegaConf.create({"name": "shakespeare", "kind": "language", "vocab_size": 65, "context": 8})
IMAGE = OmegaConf.create({"name": "cifar10", "kind": "image", "input_shape": [3, 8, 8], "num_classes": 10})
ARCHS = {"standard_gpt": ({"heads": 2}, LANGUAGE), "gpt": ({"heads": 2, "blocks_mass": 5.0}, LANGUAGE),
         "resnet": ({"block_depth": 1, "blocks_mass": 20.0, "kernel_size": 3}, IMAGE),
         "test_mup:uneven_mlp": ({}, IMAGE)}


def uneven_mlp(arch, data):
    """A user's network whose hidden layer grows unevenly (fan-in w + 16, fan-out w: m_in ≠ m_out)."""
    return (with_role(Linear(data.num_classes, arch.width), "output") @ ReLU()
            @ with_role(Linear(arch.width, arch.width + 16), "hidden") @ ReLU()
            @ with_role(Linear(arch.width + 16, 192), "input") @ Flatten())
LR = 0.01


def arch_at(name: str, width: int):
    extra, _ = ARCHS[name]
    return OmegaConf.create({"name": name, "width": width, "depth": 1, **extra})


def torch_mirror(net) -> nn.ModuleList:
    """One torch layer per atom, of the same shape; the readout (role "output") as mup's MuReadout."""
    layers = []
    for atom, role in zip(net.atom_list(), layer_roles(net)):
        if isinstance(atom, Embed):
            layers.append(nn.Embedding(atom.num_embed, atom.d_embed))
        elif isinstance(atom, Conv2D):
            layers.append(nn.Conv2d(atom.d_in, atom.d_out, atom.kernel_size, bias=False))
        elif role == "output":
            layers.append(mup.MuReadout(atom.d_in, atom.d_out, bias=False))
        else:
            layers.append(nn.Linear(atom.d_in, atom.d_out, bias=False))
    return nn.ModuleList(layers)


def reference(name: str, width: int, base_width: int, optimizer: str):
    """microsoft/mup's parametrisation of our network's shapes, and each layer's initial RMS under it (exact): the
    readout drawn at its standard 1/√fan-in scale from the base network's own, then rescaled by
    ``set_base_shapes``; every other layer at the base network's scale times the factor by which ``mup.init``
    scales any constant-std initialisation with width."""
    _, data = ARCHS[name]
    ours, base = build_model(arch_at(name, width), data), build_model(arch_at(name, base_width), data)
    model, base_model = torch_mirror(ours), torch_mirror(base)
    standard = {}
    for layer, atom, base_atom in zip(model, ours.atom_list(), base.atom_list()):
        if isinstance(layer, mup.MuReadout):  # standard parametrisation at this width: ∝ 1/√fan-in
            standard[layer] = init_rms(base_atom) * math.sqrt(base_atom.d_in / atom.d_in)
            nn.init.constant_(layer.weight, standard[layer])
    mup.set_base_shapes(model, base_model)
    scales = []
    for layer, base_atom in zip(model, base.atom_list()):
        if isinstance(layer, mup.MuReadout):
            scales.append(float(layer.weight.detach()[0, 0]) * multiplier(layer))
        else:
            with torch.no_grad():  # the rule every mup.init sampler shares, with a sampler that writes its scale
                mup.init.constant_std_init_(layer.weight, lambda tensor, scale=1.0: tensor.fill_(scale))
            scales.append(init_rms(base_atom) * float(layer.weight.detach().flatten()[0]))
    make = mup.MuAdam if optimizer == "adam" else mup.MuSGD
    extra = {"eps": 1e-30} if optimizer == "adam" else {"momentum": 0.9}
    return model, make(model.parameters(), lr=LR, **extra), scales


def ours(name: str, width: int, base_width: int, optimizer: str):
    _, data = ARCHS[name]
    cfg = optim_config(name=optimizer, mode="mup", lr=LR, mup_base_width=base_width, schedule="constant")
    net = build_network(arch_at(name, width), data, VARIANTS["modular"], cfg)
    return net, cfg, MODES["mup"].initial_weights(net, net.initialize(seed=1))


def multiplier(layer: nn.Module) -> float:
    return layer.output_mult / layer.width_mult() if isinstance(layer, mup.MuReadout) else 1.0


@pytest.mark.parametrize("name", list(ARCHS))
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_every_layer_matches_microsoft_mup(name, optimizer):
    """At two widths and two base widths: each layer's LR, output multiplier and initial scale, and the first
    step's change of every weight from the same weights and gradients."""
    for width, base_width in ((32, 8), (32, 16), (64, 8), (64, 16)):
        if name == "resnet":
            width, base_width = width // 4, base_width // 4  # convolutions: 8 … 16 channels over 2 … 4
        model, reference_optimizer, initial_scales = reference(name, width, base_width, optimizer)
        net, cfg, weights = ours(name, width, base_width, optimizer)
        lr_of = {id(p): group["lr"] for group in reference_optimizer.param_groups for p in group["params"]}
        for layer, atom, rule, w, theirs in zip(model, net.atom_list(), rules_of(net), weights, initial_scales,
                                                strict=True):
            where = f"{name} width {width} base {base_width} {atom.describe()}"
            assert LR * rule.lr == pytest.approx(lr_of[id(layer.weight)], rel=1e-12), where
            assert atom.forward_scale == pytest.approx(multiplier(layer), rel=1e-12), where
            assert init_rms(atom) * rule.init == pytest.approx(theirs, rel=1e-6), where  # theirs: float32
            # and the weights drawn have it (orthogonal: exactly; Gaussian: within sampling error)
            rms = float(atom.effective(w).pow(2).mean().sqrt())
            assert rms == pytest.approx(theirs, rel=1e-5 if atom.init_std is None else 4 / math.sqrt(w.numel())), where
        # One step from the same stored weights and gradients: the same change of every weight.
        torch.manual_seed(2)
        grads = [torch.randn_like(w) for w in weights]
        for layer, w, g in zip(model, weights, grads):
            layer.weight.data.copy_(w)
            layer.weight.grad = g.clone()
        before = [w.clone() for w in weights]
        reference_optimizer.step()
        optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, t=0, total_steps=10)
        for layer, w, w0, atom in zip(model, weights, before, net.atom_list()):
            torch.testing.assert_close(w0 - w, w0 - layer.weight.detach(), rtol=1e-4, atol=1e-8, msg=atom.describe())


def test_rules_by_hand():
    """Standard GPT at width 128 (4 heads: d_head 32) over base 32 (d_head 8): m = 4 for every growing size."""
    arch = OmegaConf.create({"name": "standard_gpt", "width": 128, "depth": 2, "heads": 4})
    adam = build_network(arch, LANGUAGE, VARIANTS["paper"], optim_config(mode="mup", mup_base_width=32))
    sgd = build_network(arch, LANGUAGE, VARIANTS["paper"], optim_config(name="sgd", mode="mup", mup_base_width=32))
    expected = {  # role: (kind, Adam LR, SGD LR, init factor, output multiplier)
        "embed.token": ("input", 1, 4, 1, 1), "embed.position": ("input", 1, 4, 1, 1),
        "attn.q": ("hidden", 1 / 4, 1, 1 / 2, 1), "mlp.in": ("hidden", 1 / 4, 1, 1 / 2, 1),
        "mlp.out": ("hidden", 1 / 4, 1, 1 / 2, 1),
        # its fixed 0.02 brought to μP's 1/width: the base's 0.02 / 4 (Tensor Programs V: variance 1/width²)
        "output": ("readout", 1, 4, 1 / 4, 1 / 4)}
    for role, a, s in zip(layer_roles(adam), rules_of(adam), rules_of(sgd)):
        if role in expected:
            kind, adam_lr, sgd_lr, init, output = expected[role]
            assert (a.kind, a.lr, s.lr, a.init, a.output) == pytest.approx((kind, adam_lr, sgd_lr, init, output)), role
    # the standard GPT's 1/√d_head logits become √d₀/d_head = √8/32; the modular GPT's 1/d_head stays
    scales = [m.scale for m in modules(adam) if isinstance(m, FunctionalAttention)]
    assert scales == pytest.approx([math.sqrt(8) / 32] * 2)
    gpt = OmegaConf.create({"name": "gpt", "width": 128, "depth": 1, "heads": 4, "blocks_mass": 5.0})
    modular = build_network(gpt, LANGUAGE, VARIANTS["paper"], optim_config(mode="mup"))
    assert [m.scale for m in modules(modular) if isinstance(m, FunctionalAttention)] == [None]
    # the modular readout (65 × 128, orthogonal √(65/128)): RMS √65/128 here, 1/√32 at the base (65 > 32)
    readout = rules_of(modular)[-1]
    assert readout.init == pytest.approx((1 / math.sqrt(32)) / (math.sqrt(65) / 128) / 4)
    assert init_rms(modular.atom_list()[-1]) == pytest.approx(math.sqrt(65) / 128)


def test_at_the_base_width_mup_is_unnormed():
    """Every multiplier is 1 at the base width: three steps of μP and of unnormed Adam give the same weights."""
    arch = OmegaConf.create({"name": "standard_gpt", "width": 32, "depth": 1, "heads": 2})
    x = torch.randint(0, 65, (4, 8))
    results = []
    for mode in ("mup", "unnormed"):
        cfg = optim_config(mode=mode, lr=0.01, mup_base_width=32)
        net = build_network(arch, LANGUAGE, VARIANTS["modular"], cfg)
        weights = [w.requires_grad_() for w in MODES[mode].initial_weights(net, net.initialize(seed=0))]
        state = init_state(weights, cfg)
        for t in range(3):
            loss = nn.functional.cross_entropy(net(x, weights).flatten(0, 1), x.roll(-1, 1).flatten())
            grads = torch.autograd.grad(loss, weights)
            optimizer_step(net, weights, list(grads), state, cfg, t=t, total_steps=3)
        results.append([w.detach() for w in weights])
    for mup_weight, unnormed_weight in zip(*results):
        assert torch.equal(mup_weight, unnormed_weight)
    # one width up, the same network is no longer the same run: its hidden steps are halved
    wider = build_network(OmegaConf.merge(arch, {"width": 64}), LANGUAGE, VARIANTS["modular"],
                          optim_config(mode="mup", mup_base_width=32))
    assert {rule.lr for rule in rules_of(wider)} == {1.0, 0.5}


def test_zero_options_and_weight_decay():
    arch = OmegaConf.create({"name": "gpt", "width": 64, "depth": 1, "heads": 2, "blocks_mass": 5.0})
    cfg = optim_config(mode="mup", mup_readout_zero=True, mup_query_zero=True, wd=0.5, lr=0.1)
    net = build_network(arch, LANGUAGE, VARIANTS["modular"], cfg)
    weights = MODES["mup"].initial_weights(net, net.initialize(seed=0))
    zeroed = {role for role, w in zip(layer_roles(net), weights) if not w.any()}
    assert zeroed == {"output", "attn.q"}
    # decoupled decay at the global LR for every layer (mup's MuAdamW: LR/m × wd·m), whatever its LR multiplier
    decayed = MODES["mup"].regularize(net, weights, torch.tensor(0.1 * 0.5))
    assert all(torch.allclose(d, w * 0.95) for d, w in zip(decayed, weights))
    # the paper variant's embedding rows go back to RMS 1 after the decay, as in every other mode
    paper = build_network(arch, LANGUAGE, VARIANTS["paper"], cfg)
    weights = [w * 1.5 for w in MODES["mup"].initial_weights(paper, paper.initialize(seed=0))]
    decayed = MODES["mup"].regularize(paper, weights, torch.tensor(0.05))
    for role, d, w in zip(layer_roles(paper), decayed, weights):
        if role.startswith("embed"):
            assert d.pow(2).mean(dim=-1).sqrt() == pytest.approx(torch.ones(d.shape[0]), abs=1e-6), role
        else:
            assert torch.allclose(d, w * 0.95), role


def test_refusals_name_the_value_and_the_layers(tmp_path):
    def problems(*overrides):
        return config_problems(compose_config(*overrides))

    assert problems("optim.mode=mup", "arch.width=16") == [
        "optim.mup.base_width=32 is above arch.width=16: μP scales up from its base; set optim.mup.base_width to "
        "the sweep's smallest width or below"]
    assert problems("optim.mode=mup", "optim.mup.base_width=0") == ["optim.mup.base_width=0; must be an integer >= 1"]
    assert problems("optim.mode=mup", "optim.mup.base_width=1", "arch.width=16") == []  # the smallest base there is
    assert problems("optim.mode=mup", "optim.mup.base_width=16", "arch.width=16") == []  # the base width itself
    assert problems("optim.mode=mup", "arch=resmlp", "data=cifar10", "optim.mup.query_zero=true")[0].startswith(
        "optim.mup.query_zero=true: no layer has the role 'attn.q'")
    assert problems("optim.mode=mup") == [] and problems("optim.mode=normed", "arch.width=16") == []
    # a user's network whose width-to-class layer has no role: named, with what to do
    module = tmp_path / "plain_net.py"
    module.write_text("from modula_cli.nn import Flatten, Linear, ReLU\n"
                      "def build(arch, data):\n"
                      "    return Linear(10, arch.width) @ ReLU() @ Linear(arch.width, 192) @ Flatten()\n"
                      "def fixed(arch, data):\n"
                      "    return Linear(10, 192) @ Flatten()\n")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        arch = OmegaConf.create({"name": "plain_net:build", "width": 64})
        with pytest.raises(ModelError, match=r"optim.mode=mup: linear2 Linear\(10, 64\) maps a width-sized input to a "
                                             r"fixed-size output, which μP allows only for the readout; give "
                                             r"the readout with_role"):
            build_network(arch, IMAGE, VARIANTS["modular"], optim_config(mode="mup"))
        # at the base width every size is the base's: the layer is still found, beside twice the base
        with pytest.raises(ModelError, match=r"linear2 Linear\(10, 32\) maps a width-sized input"):
            build_network(OmegaConf.merge(arch, {"width": 32}), IMAGE, VARIANTS["modular"], optim_config(mode="mup"))
        no_width = OmegaConf.create({"name": "plain_net:fixed"})
        with pytest.raises(ModelError, match="optim.mode=mup needs arch.width; arch.name=plain_net:fixed has none"):
            build_network(no_width, IMAGE, VARIANTS["modular"], optim_config(mode="mup"))
    finally:
        sys.path.remove(str(tmp_path))


def test_a_base_network_that_cannot_be_built_says_which_width():
    arch = OmegaConf.create({"name": "gpt", "width": 48, "depth": 1, "heads": 3, "blocks_mass": 5.0})
    with pytest.raises(ModelError, match=r"^optim.mode=mup builds the network again at width 32 \(optim.mup.base_width"
                                         r"=32\) to see which sizes grow, and it cannot be built there: GPT: width 32 "
                                         r"is not divisible by num_heads 3"):
        build_network(arch, LANGUAGE, VARIANTS["modular"], optim_config(mode="mup"))


def test_mup_settings_change_no_other_modes_run():
    normed = compose_config("optim.mode=normed")
    assert fingerprint(normed) == fingerprint(compose_config("optim.mode=normed", "optim.mup.base_width=64"))
    assert fingerprint(compose_config("optim.mode=mup")) != fingerprint(
        compose_config("optim.mode=mup", "optim.mup.base_width=64"))


def test_coordinate_check_mup_is_width_stable(tiny_text_root, tmp_path):
    from test_coord import tiny_gpt_coord

    from modula_cli.coord.check import run_coord_check

    cfg = tiny_gpt_coord(tiny_text_root, "arch=standard_gpt", "coord.widths=[32,64,128,256]", "coord.modes=[mup]")
    _, slope_table, verdict = run_coord_check(cfg, tmp_path)
    assert verdict["mup"].startswith("width-stable"), verdict["mup"]  # unnormed: not (test_coord.py, docs)
    hidden = slope_table[(slope_table["mode"] == "mup") & (slope_table["quantity"] == "own_delta_rms")]
    assert hidden["slope"].abs().max() <= 0.3


# --- exact values of the rules and refusals, derived by hand (written against a mutation pass's survivors) ----------

def test_fans_and_sizes_of_each_layer_kind_by_hand():
    """A layer of two fixed sizes is "fixed" (every multiplier 1, both optimisers); m_in and m_out are kept."""
    fixed = layer_rule(Linear(10, 7), Linear(10, 7), "sgd")
    assert fixed == LayerRule("fixed", 1.0, 1.0, 1.0, 1.0, 1.0)
    hidden = layer_rule(Linear(96, 64), Linear(48, 16), "sgd")  # m_out = 2, m_in = 4
    assert (hidden.kind, hidden.fan_out_mult, hidden.fan_in_mult, hidden.lr) == ("hidden", 2.0, 4.0, 0.5)
    gain = SimpleNamespace(describe=lambda: "Gain(4)")  # a user's atom that is neither a matrix nor an embedding
    with pytest.raises(MupError, match=r"^μP needs each layer's fan-in and fan-out; Gain\(4\) is neither a matrix nor "
                                       r"an embedding \(modula_cli.nn.MatrixAtom or Embed\)$"):
        fans(gain)
    with pytest.raises(MupError, match=r"^μP cannot size the initialisation of Gain\(4\)$"):
        init_rms(SimpleNamespace(describe=gain.describe, init_std=None))


def test_the_stray_readout_check_by_hand():
    """Layers are named input first: linear1 reads the input, linear3 is the readout."""
    net = with_role(Linear(10, 64), "output") @ ReLU() @ Linear(64, 64) @ ReLU() @ Linear(64, 192)
    base = Linear(10, 32) @ ReLU() @ Linear(32, 32) @ ReLU() @ Linear(32, 192)
    # Adam by default: a hidden layer's LR is 1/m_in (SGD's would be m_out/m_in = 1)
    assert [rule.lr for rule in refuse_stray_readouts(net, base)] == [1.0, 0.5, 1.0]
    with pytest.raises(MupError, match=r"^the base network has 2 layers and this one 3: μP needs the same layers at "
                                       r"every width \(only their sizes may change\)$"):
        refuse_stray_readouts(net, Linear(10, 32) @ Linear(32, 192))
    with pytest.raises(MupError, match=r"^the base network has 3 layers and this one 3: μP needs the same layers"):
        refuse_stray_readouts(net, Linear(10, 32) @ ReLU() @ Linear(32, 32) @ ReLU() @ Embed(32, 192))
    two = Linear(10, 64) @ Linear(64, 8) @ Linear(8, 64) @ Linear(64, 192)
    two_base = Linear(10, 32) @ Linear(32, 8) @ Linear(8, 32) @ Linear(32, 192)  # two fan-ins grow, not their fan-outs
    with pytest.raises(MupError, match=r"^optim.mode=mup: linear2 Linear\(8, 64\), linear4 Linear\(10, 64\) map a "
                                       r"width-sized input"):
        refuse_stray_readouts(two, two_base)


def test_a_prepared_network_is_asked_for_twice_the_base_width_and_its_rules_hold_per_member():
    asked = []

    def resize(width):
        asked.append(width)
        return build_model(arch_at("standard_gpt", width), LANGUAGE)

    cfg = optim_config(mode="mup", mup_base_width=16)
    net = MODES["mup"].network(build_model(arch_at("standard_gpt", 64), LANGUAGE), resize, cfg)
    assert asked == [16, 32]
    assert MODES["mup"].summary_fields(cfg, torch.device("cpu")) == {"mup_base_width": 16}
    rules = rules_of(net)
    # packed: one LR per member (K = 2), each piece scaled by its member's LR times its layer's multiplier
    pieces = [torch.ones(2, *w.shape) for w in net.initialize(seed=0)]
    lrs = torch.tensor([0.5, 2.0])
    stepped = MODES["mup"].update(net, [], pieces, lrs, None, cfg)
    for piece, rule in zip(stepped, rules):
        assert piece[0].unique().tolist() == [0.5 * rule.lr] and piece[1].unique().tolist() == [2.0 * rule.lr]
    with pytest.raises(ValueError):  # a piece per layer, never a silent truncation
        MODES["mup"].update(net, [], pieces[:-1], lrs, None, cfg)
    weights = [torch.ones(2, *w.shape) for w in net.initialize(seed=0)]
    decayed = MODES["mup"].regularize(net, weights, torch.tensor([0.1, 0.5]))
    assert all(d[0].unique().tolist() == [pytest.approx(0.9)] and d[1].unique().tolist() == [0.5] for d in decayed)
    with pytest.raises(ValueError):
        MODES["mup"].regularize(net, weights[:-1], torch.tensor([0.1, 0.5]))
    with pytest.raises(ValueError):
        MODES["mup"].initial_weights(net, weights[:-1])
    with pytest.raises(RuntimeError, match="^optim.mode=mup on a network that Mup.network did not prepare$"):
        rules_of(build_model(arch_at("standard_gpt", 64), LANGUAGE))


def test_mode_problems_by_hand():
    mup, cfg = MODES["mup"], optim_config(mode="mup")
    assert mup.problems(cfg, None) == [] and mup.problems(cfg, ("output", "hidden")) == []  # nothing to zero
    no_width = OmegaConf.create({"name": "mine:net"})
    assert mup.problems(cfg, None, no_width) == [
        "optim.mode=mup needs arch.width (μP scales each layer from the base width); arch.name=mine:net has none"]
    assert mup.problems(optim_config(mode="mup", mup_query_zero=True), ("input", "output")) == [
        "optim.mup.query_zero=true: no layer has the role 'attn.q' (roles: input, output)"]
