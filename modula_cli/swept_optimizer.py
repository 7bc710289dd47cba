"""The answer in your own training loop: the swept mode and recipe as a ``torch.optim.Optimizer``.

The LR a sweep predicts belongs to the optimiser it swept: the base optimiser's settings (β2 0.99, ε 0 unless
the config says otherwise), the mode's per-layer rules (μP's base width and multipliers, Muon's hidden
matrices and Adam layers) and the recipe (schedule, warm-up, floor, clipping, weight decay). ``optimizer(model,
config)`` builds exactly that optimiser from a run's ``config.yaml`` for the user's own model::

    opt = modula_cli.optimizer(model, "outputs/sweeps/width/…/width=64,lr=…/config.yaml",
                               "arch.width=1024", "optim.lr=0.0447", "train.steps=20000")
    for step in range(20000):
        loss = model(x, y)[1]                 # the user's forward and loss (mean cross-entropy)
        loss.backward()
        opt.step()                            # the schedule's factor for this step, clipping, the mode's map
        opt.zero_grad(set_to_none=True)

Built, it also changes what the mode changes about the network, so that the model computes the swept function:
μP's initial weights (its init rule applied to the model's own draw), its readout multiplier (a parametrization
of the readout's weight) and a tied readout's input scale (a forward pre-hook). The optimiser steps the model's
parameters in place; its state saves and loads as any torch optimiser's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.nn.utils import parametrize

from .config.run_config import RunConfig
from .config.validate import checked_optim
from .data import build_dataset
from .models import ModelError
from .nn import Module
from .nn.torch_network import TorchNetwork
from .optim import MODES, OptimConfig, build_network, init_state, optimizer_step, single_lr
from .optim.step import lr_factor


class _Times(nn.Module):
    """A parametrization: the parameter times a constant (μP's readout multiplier, as the swept network has it)."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, stored: torch.Tensor) -> torch.Tensor:
        return stored * self.factor


def _config(config: str | os.PathLike | DictConfig, overrides: Sequence[str]) -> DictConfig:
    cfg = OmegaConf.load(config) if not isinstance(config, DictConfig) else config.copy()
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    if isinstance(OmegaConf.select(cfg, "optim.lr"), Sequence) and not isinstance(cfg.optim.lr, str):
        raise ValueError(f"optim.lr={list(cfg.optim.lr)} is a packed list; give the one LR to train with, "
                         f"e.g. optim.lr=0.0447")
    if isinstance(OmegaConf.select(cfg, "train.seed"), Sequence):
        cfg.train.seed = int(cfg.train.seed[0])
    return cfg


def _parameter_names(model: nn.Module) -> dict[str, nn.Parameter]:
    """Each parameter of ``model`` by the name the swept network knows it by (a parametrized weight's original
    under its own name)."""
    return {name.replace("parametrizations.", "").replace(".original", ""): p for name, p in model.named_parameters()}


class SweptOptimizer(torch.optim.Optimizer):
    """One optimiser step of the swept mode and recipe on the model's parameters (``optimizer`` builds it)."""

    def __init__(self, params: list[torch.Tensor], net: Module, opt: OptimConfig, total_steps: int):
        super().__init__(params, {"lr": single_lr(opt)})
        self.net, self.opt, self.total_steps = net, opt, total_steps
        self.weights = params
        self.optim_state = init_state([p.detach() for p in params], opt)
        self.step_count = 0

    @property
    def lr_now(self) -> float:
        """The learning rate the next step takes (the schedule's factor × the LR)."""
        return single_lr(self.opt) * lr_factor(self.opt, self.step_count, self.total_steps)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.weights]
        optimizer_step(self.net, [p.data for p in self.weights], grads, self.optim_state, self.opt,
                       self.step_count, self.total_steps)
        self.step_count += 1
        self.param_groups[0]["lr"] = self.lr_now
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step_count, "optim": self.optim_state.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step_count = int(state_dict["step"])
        self.optim_state.load_state_dict(state_dict["optim"], self.weights[0].device)
        self.param_groups[0]["lr"] = self.lr_now


def optimizer(model: nn.Module | Module, config: str | os.PathLike | DictConfig, *overrides: str,
              weights: list[torch.Tensor] | None = None) -> SweptOptimizer:
    """The optimiser a run of ``config`` (a run's ``config.yaml``, or a composed config) trains with, for
    ``model``: a plain torch model built by the config's ``arch.name`` (its parameters are stepped), or a
    network of ``modula_cli.nn``'s atoms with its ``weights`` (tensors that require grad). ``overrides``
    (``"arch.width=1024"``, ``"optim.lr=0.0447"``, ``"train.steps=20000"``) say the run you will train; the
    schedule runs over its ``train.steps``."""
    cfg = _config(config, overrides)
    opt = checked_optim(cfg)
    if opt.lr is None:
        opt = dataclasses.replace(opt, lr=single_lr(opt, str(cfg.arch.name)))
    run = RunConfig.of(cfg, opt)
    data = build_dataset(run.data.name, **run.data_options)  # the network's shapes (vocabulary, classes)
    net = build_network(run.builder_arch, data, run.variant, opt)
    mode = MODES[opt.mode]
    if isinstance(net, TorchNetwork):
        params = _adopt(model, net, mode)
    else:
        if weights is None:
            raise ValueError(f"arch.name={cfg.arch.name} is a network of modula_cli.nn's atoms: pass its weights "
                             f"(optimizer(net, config, weights=weights), tensors that require grad)")
        params = list(weights)
        with torch.no_grad():
            for param, value in zip(params, mode.initial_weights(net, [p.detach() for p in params]), strict=True):
                param.copy_(value)
    return SweptOptimizer(params, net, opt, run.train.steps)


def _adopt(model: nn.Module, net: TorchNetwork, mode: Any) -> list[nn.Parameter]:
    """The user's model made the swept network's function: the same parameters (by name and shape, in the
    network's order), the mode's multipliers installed, its initial weights set. Its parameters, in order."""
    if not isinstance(model, nn.Module):
        raise ModelError(f"optimizer(model, …): arch.name={net.describe()} builds a torch.nn.Module; pass that model, "
                         f"got {type(model).__name__}")
    found = _parameter_names(model)
    expected = {name: atom.shape for name, atom in zip(net.names, net.atom_list())}
    differing = [n for n in expected if n not in found or tuple(found[n].shape) != expected[n]]
    if differing:
        name = differing[0]
        got = tuple(found[name].shape) if name in found else "missing"
        raise ModelError(f"optimizer(model, …): the model is not the config's network: {name} is {got}, the config "
                         f"builds {expected[name]} (set the overrides to your model's arch.width and depth)")
    for name, atom in zip(net.names, net.atom_list()):
        if atom.forward_scale != 1.0 and not parametrize.is_parametrized(atom_module(model, name), atom.local_name):
            parametrize.register_parametrization(atom_module(model, name), atom.local_name,
                                                 _Times(atom.forward_scale))
    for path, factor in net.input_scales.items():
        model.get_submodule(path).register_forward_pre_hook(
            lambda _, inputs, factor=factor: (inputs[0] * factor, *inputs[1:]))
    params = [_parameter_names(model)[name] for name in net.names]
    with torch.no_grad():
        for param, value in zip(params, mode.initial_weights(net, [p.detach() for p in params]), strict=True):
            param.copy_(value)
    return params


def atom_module(model: nn.Module, name: str) -> nn.Module:
    return model.get_submodule(name.rpartition(".")[0])
