"""A plain ``torch.nn.Module`` as an architecture: μP against microsoft/mup (the model with its readout swapped for
``mup.MuReadout``, ``set_base_shapes``, ``MuAdam`` / ``MuSGD``), Muon against ``torch.optim.Muon``, the modes that
do not apply, packing, buffers, and each bad input's one line."""

import sys
from pathlib import Path

import mup
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from modula_cli.config.identity import numeric_settings
from modula_cli.models import ModelError, build_model
from modula_cli.models.variant import VARIANTS
from modula_cli.nn.loss import grads_of, losses_and_hits
from modula_cli.nn.torch_network import TorchNetwork, parameter_fans
from modula_cli.optim import MODES, build_network, init_state, optimizer_step
from modula_cli.optim.modes.mup import rules_of
from modula_cli.optim.modes.muon import muon_scale
from modula_cli.run.context import check_packable
from modula_cli.run.state import RunState

from helpers import compose_config, optim_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES / "torch_gpt"))  # torch_gpt:torch_gpt, as a user's folder holds it
sys.path.insert(0, str(EXAMPLES / "nanogpt"))  # nanogpt:nanogpt and its model.py

LANGUAGE = OmegaConf.create({"name": "shakespeare", "kind": "language", "vocab_size": 65, "context": 8})
IMAGE = OmegaConf.create({"name": "cifar10", "kind": "image", "input_shape": [3, 8, 8], "num_classes": 10})
MODELS = {"gpt": ("torch_gpt:torch_gpt", {"depth": 2, "head_dim": 8}, LANGUAGE, "lm_head"),
          "conv": ("torch_models:conv_net", {}, IMAGE, "fc"), "uneven": ("torch_models:uneven_mlp", {}, IMAGE, "head")}
LR = 0.01


def arch_of(model: str, width: int, **extra):
    name, keys, _, _ = MODELS[model]
    return OmegaConf.create({"name": name, "width": width, **keys, **extra})


def batch(model: str, size: int = 4, seed: int = 3):
    data = MODELS[model][2]
    generator = torch.Generator().manual_seed(seed)
    if data.kind == "language":
        x = torch.randint(0, data.vocab_size, (size, data.context), generator=generator)
        return x, torch.randint(0, data.vocab_size, (size, data.context), generator=generator)
    return torch.randn(size, *data.input_shape, generator=generator), torch.randint(0, 10, (size,), generator=generator)


def built(model: str, width: int, seed: int = 5) -> nn.Module:
    """The user's model as their own code builds it under ``seed``."""
    from modula_cli.models.builders import import_builder

    name, _, data, _ = MODELS[model]
    torch.manual_seed(seed)
    return import_builder(name)(arch_of(model, width), data)


def mup_reference(model: str, width: int, base_width: int, optimizer: str, seed: int = 5):
    """microsoft/mup on the user's model: its readout swapped for a MuReadout holding the same initial weights,
    ``set_base_shapes`` against the model at the base width, and MuAdam / MuSGD at LR."""
    readout = MODELS[model][3]

    def with_mu_readout(net: nn.Module) -> nn.Module:
        old = getattr(net, readout)
        new = mup.MuReadout(old.in_features, old.out_features, bias=old.bias is not None)
        new.load_state_dict(old.state_dict())
        setattr(net, readout, new)
        return net

    net = with_mu_readout(built(model, width, seed))
    mup.set_base_shapes(net, with_mu_readout(built(model, base_width, seed)))
    make = mup.MuAdam if optimizer == "adam" else mup.MuSGD
    extra = {"eps": 1e-30} if optimizer == "adam" else {"momentum": 0.9}
    return net, make(net.parameters(), lr=LR, **extra)


def ours(model: str, width: int, base_width: int, optimizer: str, mode: str = "mup", seed: int = 5, **settings):
    _, _, data, _ = MODELS[model]
    cfg = optim_config(name=optimizer, mode=mode, lr=LR, mup_base_width=base_width, schedule="constant", **settings)
    net = build_network(arch_of(model, width), data, VARIANTS["modular"], cfg)
    return net, cfg, MODES[mode].initial_weights(net, net.initialize(seed=seed))


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_mup_on_a_plain_model_matches_microsoft_mup(model, optimizer):
    """At two widths over a base: every parameter's LR, initial weights and the readout's multiplier; the same
    logits and gradients; one step's change of every parameter (rtol 1e-4)."""
    widths = ((32, 16), (64, 16)) if model != "conv" else ((16, 8), (32, 8))
    for width, base in widths:
        reference, reference_optimizer = mup_reference(model, width, base, optimizer)
        net, cfg, weights = ours(model, width, base, optimizer)
        parameters = dict(reference.named_parameters())
        lr_of = {id(p): group["lr"] for group in reference_optimizer.param_groups for p in group["params"]}
        readout = getattr(reference, MODELS[model][3])
        for atom, rule, w in zip(net.atom_list(), rules_of(net), weights, strict=True):
            theirs, where = parameters[atom.role], f"{model} width {width} base {base} {atom.role}"
            assert LR * rule.lr == pytest.approx(lr_of[id(theirs)], rel=1e-12), where
            torch.testing.assert_close(w, theirs.detach(), rtol=1e-6, atol=0, msg=where)
            expected = 1 / readout.width_mult() if atom.role == f"{MODELS[model][3]}.weight" else 1.0
            assert atom.forward_scale == pytest.approx(expected, rel=1e-12), where
        x, y = batch(model)
        weights = [w.requires_grad_() for w in weights]
        loss = losses_and_hits(net, weights, x, y)[0]
        grads = grads_of(loss, weights)
        reference_loss = nn.functional.cross_entropy(reference(x).reshape(-1, MODELS[model][2].get(
            "vocab_size", 10)), y.reshape(-1))
        reference_loss.backward()
        torch.testing.assert_close(loss.detach()[0], reference_loss.detach(), rtol=1e-5, atol=1e-6)
        for atom, g in zip(net.atom_list(), grads):
            torch.testing.assert_close(g, parameters[atom.role].grad, rtol=1e-4, atol=1e-7,
                                       msg=lambda m, role=atom.role: f"{role}: {m}")
            parameters[atom.role].grad = g.clone()  # the step from the same gradients: Adam's first is sign(g)
        before = [w.detach().clone() for w in weights]
        reference_optimizer.step()
        with torch.no_grad():
            optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, t=0, total_steps=10)
        for atom, w, w0 in zip(net.atom_list(), weights, before):
            # atol: the rounding of a float32 weight near 0.1 (its unit in the last place), not of the change
            torch.testing.assert_close(w0 - w.detach(), w0 - parameters[atom.role].detach(), rtol=1e-4, atol=1e-7,
                                       msg=lambda m, role=atom.role: f"{role}: {m}")


NANOGPT = {"name": "nanogpt:nanogpt", "depth": 2, "head_dim": 8, "dropout": 0.0, "bias": True}


def nanogpt_reference(width: int, base_width: int, optimizer: str, seed: int = 5):
    """microsoft/mup on nanoGPT's tied model: ``lm_head`` replaced by a ``MuSharedReadout`` of ``wte``'s table,
    ``set_base_shapes`` without its rescale of the table (``rescale_params=False``: our reading, docs/mup.md), every
    other linear bias rescaled as ``set_base_shapes`` does, and MuAdam / MuSGD at LR."""
    from modula_cli.models.builders import import_builder

    def shared(width: int) -> nn.Module:
        torch.manual_seed(seed)
        model = import_builder("nanogpt:nanogpt")(OmegaConf.create({**NANOGPT, "width": width}), LANGUAGE)
        model.lm_head = mup.MuSharedReadout(model.transformer.wte.weight, bias=False)
        return model

    model = shared(width)
    mup.set_base_shapes(model, shared(base_width), rescale_params=False)
    for module in model.modules():
        if isinstance(module, nn.Linear) and not isinstance(module, mup.MuReadout):
            mup.layer.rescale_linear_bias(module)
    make = mup.MuAdam if optimizer == "adam" else mup.MuSGD
    extra = {"eps": 1e-30} if optimizer == "adam" else {"momentum": 0.9}
    return model, make(model.parameters(), lr=LR, **extra)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_mup_on_nanogpts_tied_embedding_and_readout_matches_microsoft_mups_shared_readout(optimizer):
    """nanoGPT as users have it (forward(idx, targets) → (logits, loss), lm_head tied to wte) at width 32 over base
    16 (m = 2): the shared table keeps its own draw and an embedding's LR, the readout's input is divided by m, and
    every parameter's LR, initial weights, the logits, the gradients and one step equal mup's MuSharedReadout's."""
    reference, reference_optimizer = nanogpt_reference(32, 16, optimizer)
    cfg = optim_config(name=optimizer, mode="mup", lr=LR, mup_base_width=16, schedule="constant")
    net = build_network(OmegaConf.create({**NANOGPT, "width": 32}), LANGUAGE, VARIANTS["modular"], cfg)
    weights = MODES["mup"].initial_weights(net, net.initialize(seed=5))
    assert net.tied == {"transformer.wte.weight": ["transformer.wte.weight", "lm_head.weight"]}
    assert net.targets == "targets" and net.input_scales == {"lm_head": 0.5}
    parameters = dict(reference.named_parameters())
    assert sorted(parameters) == sorted(atom.role for atom in net.atom_list())
    lr_of = {id(p): group["lr"] for group in reference_optimizer.param_groups for p in group["params"]}
    for atom, rule, w in zip(net.atom_list(), rules_of(net), weights, strict=True):
        theirs = parameters[atom.role]
        assert LR * rule.lr == pytest.approx(lr_of[id(theirs)], rel=1e-12), atom.role
        assert atom.forward_scale == 1.0, atom.role
        torch.testing.assert_close(w, theirs.detach(), rtol=1e-6, atol=0, msg=atom.role)
    x, y = batch("gpt")
    weights = [w.requires_grad_() for w in weights]
    loss = losses_and_hits(net, weights, x, y)[0]
    grads = grads_of(loss, weights)
    logits, reference_loss = reference(x, y)  # with targets: every position's logits, and nanoGPT's own loss
    torch.testing.assert_close(net(x, weights).detach(), logits.detach(), rtol=1e-5, atol=1e-6)
    reference_loss.backward()
    torch.testing.assert_close(loss.detach()[0], reference_loss.detach(), rtol=1e-5, atol=1e-6)
    for atom, g in zip(net.atom_list(), grads):
        torch.testing.assert_close(g, parameters[atom.role].grad, rtol=1e-4, atol=1e-7, msg=atom.role)
        parameters[atom.role].grad = g.clone()
    before = [w.detach().clone() for w in weights]
    reference_optimizer.step()
    with torch.no_grad():
        optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, t=0, total_steps=10)
    for atom, w, w0 in zip(net.atom_list(), weights, before):
        torch.testing.assert_close(w0 - w.detach(), w0 - parameters[atom.role].detach(), rtol=1e-4, atol=1e-7,
                                   msg=atom.role)


def test_a_tied_readout_cannot_start_at_zero_under_mup():
    arch = OmegaConf.create({"name": "torch_models:tied_gpt", "width": 32})
    with pytest.raises(ModelError) as error:
        build_network(arch, LANGUAGE, VARIANTS["modular"], optim_config(mode="mup", mup_base_width=16,
                                                                       mup_readout_zero=True))
    assert str(error.value) == (
        "optim.mup.readout_zero=true: the readout shares wte.weight with the embedding, which a zero start would zero "
        "too (mup's MuSharedReadout leaves the shared table as drawn); leave optim.mup.readout_zero false, or untie "
        "them")


def test_mup_kinds_of_the_plain_gpt_by_hand():
    """Width 64 over base 16 (m = 4): the embeddings and gains are vectors (Adam LR η), every block matrix hidden
    (η/4), the readout's weight 1/4 in the forward pass and its initial weights √4 times the model's own."""
    net, _, weights = ours("gpt", 64, 16, "adam")
    model_weights = net.initialize(seed=5)
    kinds = {atom.role: rule.kind for atom, rule in zip(net.atom_list(), rules_of(net))}
    assert kinds["wte.weight"] == kinds["wpe.weight"] == kinds["h.0.ln_1.weight"] == "input"
    assert kinds["h.1.attn.c_attn.weight"] == kinds["h.0.mlp.c_proj.weight"] == "hidden"
    assert kinds["lm_head.weight"] == "readout"
    for atom, rule, w, w_model in zip(net.atom_list(), rules_of(net), weights, model_weights):
        assert rule.lr == (0.25 if kinds[atom.role] == "hidden" else 1.0), atom.role
        torch.testing.assert_close(w, w_model * (2.0 if atom.role == "lm_head.weight" else 1.0))


# --- Muon against torch.optim.Muon -------------------------------------------------------------------------------

TORCH_RULE = {"original": "original", "match_rms_adamw": "match_rms_adamw", "spectral": "spectral_unclamped"}


@pytest.mark.parametrize("model", ["gpt", "conv"])
@pytest.mark.parametrize("rule", list(TORCH_RULE))
def test_muon_on_the_hidden_matrices_matches_torch_optim_muon(model, rule):
    """Three steps with weight decay from the same weights and gradients: each hidden matrix (a convolution's kernel
    flattened to (out, in·k·k)) moves as under ``torch.optim.Muon`` with the same ``adjust_lr_fn``. Its Newton–Schulz
    runs in bfloat16 whatever we ask, so ours does too (``ortho_dtype=bfloat16``): within 3 % of the whole change."""
    width = 32 if model == "gpt" else 16
    net, cfg, weights = ours(model, width, 8, "adam", mode="muon", muon_scale=rule, wd=0.1, ortho_dtype="bfloat16")
    atoms, hidden = net.atom_list(), net.parametrisation.hidden
    assert {atoms[i].role for i in hidden} == (
        {f"h.{b}.{m}.weight" for b in range(2) for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
        if model == "gpt" else {"stem.weight", "body.weight"})
    start = [w.clone() for w in weights]
    reference = [nn.Parameter(atoms[i].as_matrix(weights[i]).clone()) for i in hidden]
    reference_optimizer = torch.optim.Muon(reference, lr=LR, weight_decay=0.1, momentum=0.95,
                                           adjust_lr_fn=TORCH_RULE[rule])
    state, generator = init_state(weights, cfg), torch.Generator().manual_seed(1)
    for t in range(3):
        grads = [torch.randn(w.shape, generator=generator) for w in weights]
        for p, i in zip(reference, hidden):
            p.grad = atoms[i].as_matrix(grads[i]).clone()
        reference_optimizer.step()
        optimizer_step(net, weights, grads, state, cfg, t, 10)
    for p, i in zip(reference, hidden):
        change, theirs = atoms[i].as_matrix(weights[i] - start[i]), p.detach() - atoms[i].as_matrix(start[i])
        assert float((change - theirs).norm() / theirs.norm()) < 0.03, atoms[i].role


def test_muon_scale_rules_by_hand():
    """torch.optim.Muon's adjust_lr_fn on a tall (96 × 32) and a wide (32 × 128) matrix."""
    assert muon_scale("original", 96, 32) == pytest.approx(3**0.5) and muon_scale("original", 32, 128) == 1.0
    assert muon_scale("spectral", 96, 32) == pytest.approx(3**0.5) and muon_scale("spectral", 32, 128) == 0.5
    assert muon_scale("match_rms_adamw", 32, 128) == pytest.approx(0.2 * 128**0.5)
    assert muon_scale("match_rms_adamw", 96, 32) == pytest.approx(0.2 * 96**0.5)


def test_muon_leaves_embeddings_readout_and_gains_to_adam_at_its_ratio():
    """The first step of Adam (the paper's bias correction: u = sign g) at LR × optim.muon.adam_ratio on every
    parameter that is not a hidden matrix; the readout is one of them."""
    net, cfg, weights = ours("gpt", 32, 8, "adam", mode="muon", muon_adam_ratio=2.0**-6)
    start = [w.clone() for w in weights]
    grads = [torch.randn_like(w) for w in weights]
    optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, 0, 10)
    others = net.parametrisation.others
    assert {net.atom_list()[i].role for i in others} >= {"wte.weight", "wpe.weight", "lm_head.weight",
                                                          "ln_f.weight", "ln_f.bias"}
    for i in others:
        torch.testing.assert_close(start[i] - weights[i], LR * 2.0**-6 * grads[i].sign())


def test_muon_runs_on_the_modular_gpt_layer_by_layer():
    """The built-in GPT under muon: every matrix but the readout orthogonalised, the embeddings by Adam."""
    arch = OmegaConf.create({"name": "gpt", "width": 32, "depth": 1, "heads": 2, "blocks_mass": 5.0})
    cfg = optim_config(mode="muon", lr=LR, schedule="constant")
    net = build_network(arch, LANGUAGE, VARIANTS["modular"], cfg)
    layers = net.parametrisation.layers
    from modula_cli.nn import Embed, layer_roles

    for atom, role, layer in zip(net.atom_list(), layer_roles(net), layers):
        assert layer.hidden == (not isinstance(atom, Embed) and role != "output"), role
    weights = net.initialize(seed=0)
    start = [w.clone() for w in weights]
    grads = [torch.randn_like(w) for w in weights]
    optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, 0, 10)
    for i in net.parametrisation.hidden:  # one step from zero momentum: lr · scale · polar(g), singular values ≈ 1
        sigma = torch.linalg.matrix_norm((start[i] - weights[i]) / (LR * layers[i].scale), ord=2)
        assert 0.6 < float(sigma) < 1.3


# --- the modes that apply, packing, buffers ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["normed", "dualized", "manifold"])
def test_a_modular_mode_on_a_plain_model_is_one_line(mode):
    with pytest.raises(ModelError) as error:
        build_network(arch_of("conv", 16), IMAGE, VARIANTS["modular"], optim_config(mode=mode))
    assert str(error.value) == (
        f"optim.mode={mode} needs the modular norm's tree of masses and sensitivities, and arch.name=torch_models:"
        f"conv_net returns a plain torch.nn.Module; its modes: unnormed, mup, muon (or build it from modula_cli.nn's "
        f"atoms, docs/extending.md)")


def test_packed_members_compute_what_each_computes_alone():
    """Two members stacked under vmap: each one's logits and one unnormed Adam step equal its own run's."""
    net, cfg, _ = ours("gpt", 16, 8, "adam", mode="unnormed")
    x, y = batch("gpt")
    alone = [net.initialize(seed=s) for s in (0, 1)]
    stacked = [torch.stack(pair) for pair in zip(*alone)]
    logits = net(x.expand(2, *x.shape), stacked)
    for k in range(2):
        torch.testing.assert_close(logits[k], net(x, alone[k]), rtol=1e-5, atol=1e-6)
    stacked = [w.requires_grad_() for w in stacked]
    loss = losses_and_hits(net, stacked, x.expand(2, *x.shape), y.expand(2, *y.shape), members=2)[0]
    optimizer_step(net, stacked, grads_of(loss, stacked), init_state(stacked, cfg), cfg, 0, 10,
                   base_lr=torch.tensor([LR, LR]))
    for k in range(2):
        w = [a.requires_grad_() for a in alone[k]]
        grads = grads_of(losses_and_hits(net, w, x, y)[0], w)
        optimizer_step(net, w, grads, init_state(w, cfg), cfg, 0, 10)
        for packed, single in zip(stacked, w):
            torch.testing.assert_close(packed[k].detach(), single.detach(), rtol=1e-4, atol=1e-6)


def test_batch_norm_cannot_be_packed_and_its_statistics_are_checkpointed():
    arch = OmegaConf.create({"name": "torch_models:conv_net_bn", "width": 8})
    net = build_model(arch, IMAGE)
    assert isinstance(net, TorchNetwork)
    x = torch.randn(3, 4, *IMAGE.input_shape)
    with pytest.raises(ModelError, match=r"^arch.name='torch_models:conv_net_bn' cannot be packed \(torch.func.vmap"
                                         r" over the members' weights: .*\); run it with sweep.pack=false$"):
        check_packable(net, x, 3, arch.name)
    assert float(net.model.norm.running_mean.abs().sum()) == 0  # the trial pass left the statistics as they were
    weights = net.initialize(seed=0)
    state = RunState(weights, init_state(weights, optim_config(mode="unnormed")), torch.zeros(1, 1), 1,
                     buffers=net.buffers())
    with torch.enable_grad():
        net(x[0], weights)  # a training pass updates the running statistics
    saved = state.state_dict()
    assert len(saved["buffers"]) == 2 and float(saved["buffers"][0].abs().sum()) > 0
    with torch.no_grad():
        for b in net.buffers():
            b.zero_()
    state.load_state_dict(saved)
    torch.testing.assert_close(net.model.norm.running_mean, saved["buffers"][0])


def test_train_mode_for_steps_eval_mode_without_gradients():
    arch = OmegaConf.create({"name": "torch_models:conv_net_bn", "width": 8})
    net = build_model(arch, IMAGE)
    x, weights = torch.randn(4, *IMAGE.input_shape), net.initialize(seed=0)
    with torch.no_grad():
        net(x, weights)
    assert not net.model.training and int(net.model.norm.num_batches_tracked) == 0
    with torch.enable_grad():
        net(x, weights)
    assert net.model.training and int(net.model.norm.num_batches_tracked) == 1


def test_each_seed_is_the_model_built_under_it():
    net = build_model(arch_of("conv", 8), IMAGE)
    for seed in (0, 7):
        for w, p in zip(net.initialize(seed=seed), built("conv", 8, seed).parameters()):
            assert torch.equal(w, p.detach())
    assert not torch.equal(net.initialize(seed=0)[0], net.initialize(seed=7)[0])
    assert all(p.is_meta for p in net.model.parameters())  # the model is not held twice: weights come per call


def test_fans_by_module_kind():
    assert parameter_fans(nn.Linear(3, 5), "weight", torch.Size([5, 3])) == (5, 3)
    assert parameter_fans(nn.Conv2d(3, 5, 3), "weight", torch.Size([5, 3, 3, 3])) == (5, 27)
    assert parameter_fans(nn.Embedding(7, 4), "weight", torch.Size([7, 4])) == (4, 7)
    assert parameter_fans(nn.LayerNorm(6), "weight", torch.Size([6])) == (6, 1)


def test_an_edited_model_file_is_another_network(tmp_path, monkeypatch):
    (tmp_path / "edited_model.py").write_text("def f(arch, data):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    cfg = compose_config("arch.name=edited_model:f")
    first = numeric_settings(cfg)["arch"]["source"]
    (tmp_path / "edited_model.py").write_text("def f(arch, data):\n    return 1\n")
    assert numeric_settings(cfg)["arch"]["source"] != first
    assert "source" not in numeric_settings(compose_config())["arch"]


# --- bad input: one line each, before anything trains --------------------------------------------------------------

BAD = [
    ("torch_models:raises", {}, IMAGE, "unnormed",
     "arch.name='torch_models:raises' failed to build for data=cifar10 (image data): RuntimeError: out of ideas"),
    ("torch_models:flat_logits", {}, LANGUAGE, "unnormed",
     "arch.name='torch_models:flat_logits': expected (B, T, 65) logits for shakespeare (input (B, T)), got (B, 65); "
     "it returns one prediction per sequence: a language model predicts at every position (B, T, …)"),
    ("torch_models:last_position", {}, LANGUAGE, "unnormed",
     "arch.name='torch_models:last_position': expected (B, T, 65) logits for shakespeare (input (B, T)), got (B, 1, "
     "65); it returns the last position's logits alone (as nanoGPT's forward does without targets): every "
     "position's are needed, so name the parameter of its forward that takes the targets in the arch YAML "
     "(targets_keyword: targets), or return them from its forward"),
    ("torch_models:small_vocabulary", {}, LANGUAGE, "unnormed",
     "arch.name='torch_models:small_vocabulary': expected (B, T, 65) logits for shakespeare (input (B, T)), got (B, "
     "T, 50); its readout has 50 outputs: build it with data.vocab_size (65)"),
    ("torch_models:last_position", {"targets_keyword": "targets"}, LANGUAGE, "unnormed",
     "arch.targets_keyword='targets': Last.forward takes no parameter of that name (its parameters: idx, y); name "
     "one of them, or null"),
    ("torch_models:fixed_size", {}, IMAGE, "mup",
     "optim.mode=mup: no parameter of Sequential changes size with arch.width; μP scales the layers that grow with it "
     "(map your width key to arch.width, e.g. n_embd: ${.width})"),
    ("torch_models:two_heads", {}, IMAGE, "mup",
     "optim.mode=mup: cannot tell the readout of TwoHeads (matrices with 10 outputs whose fan-in grows with width: a,"
     " b); name its module in the arch YAML, e.g. readout: lm_head"),
    ("torch_models:two_heads", {"readout": "c"}, IMAGE, "muon",
     "optim.mode=muon: arch.readout='c' holds no parameter of the model; modules with a matrix: a, b, stem"),
    ("torch_models:no_matrix", {}, IMAGE, "muon",
     "optim.mode=muon: Bias has no hidden matrix for Muon to orthogonalise (every parameter is an embedding, the "
     "readout, a gain or a bias); use optim.mode=unnormed"),
]


@pytest.mark.parametrize("name, extra, data, mode, message", BAD, ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_bad_models_are_one_line_each(name, extra, data, mode, message):
    arch = OmegaConf.create({"name": name, "width": 32, **extra})
    with pytest.raises(ModelError) as error:
        build_network(arch, data, VARIANTS["modular"], optim_config(mode=mode, mup_base_width=16))
    assert str(error.value) == message


def test_a_two_headed_model_trains_under_mup_once_its_readout_is_named():
    arch = OmegaConf.create({"name": "torch_models:two_heads", "width": 32, "readout": "a"})
    with pytest.raises(ModelError, match=r"^optim.mode=mup: b.weight maps a width-sized input to a fixed-size output, "
                                         r"which μP allows only for the readout \(a\); make its output grow with "
                                         r"width$"):
        build_network(arch, IMAGE, VARIANTS["modular"], optim_config(mode="mup", mup_base_width=16))


def test_an_unknown_muon_scale_is_refused_by_the_schema():
    from modula_cli.config.validate import config_problems

    problems = config_problems(compose_config("optim.mode=muon", "optim.muon.scale=keller"))
    assert any(p.startswith("optim.muon.scale='keller'") and "original, match_rms_adamw, spectral" in p
               for p in problems), problems


def test_a_parameters_own_contribution_is_its_module_with_the_others_at_zero():
    """The coordinate check's own_delta_rms on a plain model: a linear weight's change alone (x ΔWᵀ, no bias), a bias's
    alone (Δb on every row), an embedding's rows; geometry's hooks record each module's input and output."""
    from modula_cli.run.geometry import captured, layer_geometry

    net = build_model(OmegaConf.create({"name": "torch_models:conv_net", "width": 4}), IMAGE)
    fc_weight, fc_bias = (a for a in net.atom_list() if a.module_path == "fc")
    x, change = torch.randn(5, 4), torch.randn(10, 4)
    torch.testing.assert_close(fc_weight.apply(x, change), x @ change.T)
    torch.testing.assert_close(fc_bias.apply(x, torch.ones(10)), torch.ones(5, 10))
    embedding = TorchNetwork(lambda: nn.Embedding(7, 3), logits=3).atom_list()[0]
    table = torch.randn(7, 3)
    torch.testing.assert_close(embedding.apply(torch.tensor([[1, 6]]), table), table[[1, 6]].unsqueeze(0))
    weights = net.initialize(seed=0)
    with captured(net) as seen:
        net(torch.randn(2, *IMAGE.input_shape), weights)
    assert set(seen.outputs) == set(range(len(weights)))
    records = layer_geometry(net, weights, seen, seen, weights)
    assert all(r["delta_rms"] == 0 and r["own_delta_rms"] == 0 for r in records)


def test_a_resumed_batch_norm_model_equals_an_uninterrupted_run(cifar_root, tmp_path, monkeypatch):
    """SIGTERM at step 12 of 20 (checkpoint every 7): every logged loss, the layer statistics and the test loss,
    which reads batch norm's running statistics, equal an uninterrupted run's."""
    import json

    from helpers import interrupted_at_step_12, tiny_image
    from modula_cli.run.trainer import train

    cfg = compose_config(*tiny_image("resmlp", cifar_root), "arch.name=torch_models:conv_net_bn", "arch.width=8",
                         "optim.mode=muon", "optim.lr=0.02", "train.steps=20", "train.checkpoint_every=7",
                         "train.layer_stats_every=5", "train.eval_every=10")
    reference = train(cfg, tmp_path / "reference")
    interrupted_at_step_12(cfg, tmp_path / "resumed", monkeypatch)
    resumed = train(cfg, tmp_path / "resumed")
    assert resumed.summary["test_loss"] == pytest.approx(reference.summary["test_loss"], rel=1e-6)

    def logged(run, name):
        return [json.loads(line) for line in (tmp_path / run / name).read_text().splitlines()]

    mine, theirs = logged("resumed", "metrics.jsonl"), logged("reference", "metrics.jsonl")
    assert [r["step"] for r in mine] == [r["step"] for r in theirs]  # no step logged twice
    for a, b in zip(mine, theirs):
        for key in ("train_loss", "test_loss"):
            if key in b:
                assert a[key] == pytest.approx(b[key], rel=1e-5), (b["step"], key)
    layers = [(r["step"], r["layer"]) for r in logged("resumed", "layer_stats.jsonl")]
    assert layers == [(r["step"], r["layer"]) for r in logged("reference", "layer_stats.jsonl")]
    assert ("stem.weight" in {layer for _, layer in layers}) and len(layers) == 4 * 7


def test_a_tied_readout_is_the_embedding_for_muon_and_the_tie_holds_in_every_call():
    """GPT-2's tie: one parameter (listed once), both uses fed by it in the forward pass; Muon leaves it to Adam."""
    net = build_network(OmegaConf.create({"name": "torch_models:tied_gpt", "width": 16}), LANGUAGE,
                        VARIANTS["modular"], optim_config(mode="muon"))
    assert net.tied == {"wte.weight": ["wte.weight", "lm_head.weight"]}
    assert [a.role for a in net.atom_list()] == ["wte.weight", "mix.weight", "mix.bias"]
    assert net.parametrisation.hidden == [1]
    w = net.initialize(seed=0)
    x = torch.randint(0, 65, (2, 8))
    hidden = torch.relu(w[0][x] @ w[1].T + w[2])
    torch.testing.assert_close(net(x, w), hidden @ w[0].T, rtol=0, atol=0)


def test_a_forward_that_returns_every_logit_only_with_targets_is_given_them():
    """auto: a forward with a ``targets`` parameter gets placeholder targets (nanoGPT's); another name is one YAML
    key away (``targets_keyword: y``); the placeholder is the input's shape for language, one class per image."""
    from modula_cli.nn.torch_network import placeholder_targets

    x = torch.randint(0, 65, (3, 8))
    last = build_network(OmegaConf.create({"name": "torch_models:last_position", "width": 16, "targets_keyword": "y"}),
                         LANGUAGE, VARIANTS["modular"], optim_config(mode="unnormed"))
    assert last.targets == "y" and last(x, last.initialize(seed=0)).shape == (3, 8, 65)
    nano = build_network(OmegaConf.create({**NANOGPT, "width": 16}), LANGUAGE, VARIANTS["modular"],
                         optim_config(mode="unnormed"))
    assert nano.targets == "targets" and nano(x, nano.initialize(seed=0)).shape == (3, 8, 65)
    packed = [torch.stack(pair) for pair in zip(nano.initialize(seed=0), nano.initialize(seed=1))]
    assert nano(x.expand(2, *x.shape), packed).shape == (2, 3, 8, 65)  # under vmap, each member its own targets
    with pytest.raises(ModelError, match=r"got \(B, 1, 65\); it returns the last position's logits alone"):
        build_model(OmegaConf.create({**NANOGPT, "width": 16, "targets_keyword": None}), LANGUAGE)
    assert placeholder_targets(x).shape == x.shape and placeholder_targets(x).dtype == torch.long
    assert placeholder_targets(torch.randn(4, 3, 8, 8)).shape == (4,)
