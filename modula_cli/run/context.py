"""What stays fixed while a run trains (``RunContext``): its settings, device, data, network, the compiled
step, and each step's batch and each member's initial weights."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..config.members import Members
from ..config.run_config import RunConfig
from ..config.schema import TrainConfig
from ..data import Dataset, build_dataset
from ..models import ModelError, is_import_path
from ..models.config import ArchConfig
from ..models.variant import Variant, explain_scope, iterations
from ..nn import Module, layer_roles
from ..nn.loss import grads_of, losses_and_hits
from ..nn.torch_network import TorchNetwork
from ..optim import MODES, OptimConfig, build_network, init_state
from ..optim.step import apply_update, update_restore_point
from ..plumbing import environment
from ..plumbing.device import resolve_device
from .compiled import Compiled
from .state import RunState

log = logging.getLogger(__name__)


@dataclass
class RunContext:
    """What stays fixed while a run trains: settings, device, data, network and the compiled step."""

    config: RunConfig
    members: Members
    rank: int
    world: int
    device: torch.device
    data: Dataset
    net: Module
    compute: Callable[..., tuple[torch.Tensor, list[torch.Tensor]]]
    eval_batches: list[tuple[torch.Tensor, torch.Tensor]]  # shared by every member (and seed)
    seed_index: torch.Tensor | None = None  # packed: each member's position among the run's seeds
    update: Callable[..., torch.Tensor] | None = None  # train.compile: the compiled optimiser update

    @classmethod
    def build(cls, config: RunConfig, members: Members, rank: int, world: int) -> RunContext:
        train = config.train
        device = run_device(train.device, world)
        if train.batch_size % world:
            raise ValueError(f"train.batch_size={train.batch_size} must divide evenly over {world} processes")
        if (train.batch_size // world) % train.grad_accum:
            raise ValueError(f"train.grad_accum={train.grad_accum} must divide each process's "
                             f"{train.batch_size // world} samples (train.batch_size={train.batch_size} over {world} "
                             f"processes)")
        data = build_dataset(config.data.name, **config.data_options)
        ctx = cls(config, members, rank, world, device, data,
                  build_network(config.builder_arch, data, config.variant, config.optim), compute=None,
                  eval_batches=data.eval_batches(train.eval_batches, train.batch_size, device),
                  seed_index=members.seed_index(device) if members.packed else None)
        if rank == 0 and (scope := explain_scope(config.arch.name, config.variant, ctx.net)):
            say_once(scope)
        if members.packed:
            ctx.eval_batches = [members.shared(x, y) for x, y in ctx.eval_batches]
        if isinstance(ctx.net, TorchNetwork):
            ctx.net.to_device(device)
            if members.packed:
                check_packable(ctx.net, ctx.eval_batches[0][0], len(members), config.arch.name)
        elif is_import_path(config.arch.name):  # a user's layer roles are known once it is built
            if problems := MODES[ctx.opt.mode].problems(ctx.opt, tuple(layer_roles(ctx.net))):
                raise ValueError("; ".join(problems))
        if train.compile:  # a sweep compiles many configurations in one process: start each afresh
            torch.compiler.reset()
        ctx.compute = Compiled(ctx.loss_and_grads, "the model step") if train.compile else ctx.loss_and_grads
        if train.compile:
            ctx.update = Compiled(apply_update, f"the optim.mode={ctx.opt.mode} update", update_restore_point)
        return ctx

    @property
    def train(self) -> TrainConfig:
        return self.config.train

    @property
    def arch(self) -> ArchConfig:
        return self.config.arch

    @property
    def opt(self) -> OptimConfig:
        return self.config.optim

    @property
    def variant(self) -> Variant:
        return self.config.variant

    @property
    def iterations(self) -> int:
        """Training iterations: train.steps, and in the paper variant one more at LR 0 (``variant.iterations``)."""
        return iterations(self.train.steps, self.variant)

    @property
    def units(self) -> str:
        return "tokens" if self.data.kind == "language" else "samples"

    @property
    def units_per_step(self) -> int:
        return self.train.batch_size * (self.data.context if self.data.kind == "language" else 1)

    def losses(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        """Per-member losses and hits; ``x, y`` carry the member axis when packed (see ``batch_for``)."""
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.train.dtype == "bfloat16"
                    else nullcontext())
        with autocast:
            return losses_and_hits(self.net, weights, x, y, len(self.members) if self.members.packed else None)

    def loss_and_grads(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        loss = self.losses(weights, x, y)[0]
        return loss.detach(), grads_of(loss, weights)

    def step_gradients(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        """The batch's mean loss and its gradient, over ``train.grad_accum`` equal micro-batches one after another
        (the mean of their means: one big batch's, up to float error, in a micro-batch's memory)."""
        chunks = self.train.grad_accum
        if chunks == 1:
            return self.compute(weights, x, y)
        axis = 1 if self.members.packed else 0  # packed batches lead with the member axis
        loss, grads = None, None
        for x_part, y_part in zip(x.chunk(chunks, dim=axis), y.chunk(chunks, dim=axis), strict=True):
            part_loss, part_grads = self.compute(weights, x_part, y_part)
            if grads is None:
                loss, grads = part_loss.clone(), [g.clone() for g in part_grads]
            else:
                loss += part_loss
                torch._foreach_add_(grads, part_grads)
        loss /= chunks
        torch._foreach_div_(grads, chunks)
        return loss, grads

    def batch_for(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step``'s batch of each seed; packed, with a leading member axis (each member gets its
        own seed's batch: a view when they share one seed, a gather of the few seeds' batches otherwise)."""
        size, share = self.train.batch_size, self.train.batch_size // self.world
        batches = []
        for seed in self.members.seeds:
            x, y = self.data.train_batch(step, size, seed=seed, device=self.device)
            if self.world > 1:  # every rank draws the same global batch and keeps its slice
                x, y = x[self.rank * share:(self.rank + 1) * share], y[self.rank * share:(self.rank + 1) * share]
            batches.append((x, y))
        return self.members.batch(batches, self.seed_index)

    def initial_weights(self) -> list[torch.Tensor]:
        """Each member's initial weights from its own seed (on the mode's constraint set), stacked on the member
        axis when packed."""
        mode = MODES[self.opt.mode]
        by_seed = {seed: mode.initial_weights(self.net, self.net.initialize(seed=seed, device=self.device))
                   for seed in self.members.seeds}
        return self.members.weights(by_seed)

    def fresh_state(self) -> RunState:
        k = len(self.members)
        weights = [w.requires_grad_() for w in self.initial_weights()]
        window = self.arch.loss_window
        buffers = self.net.buffers() if isinstance(self.net, TorchNetwork) else []
        return RunState(weights, init_state(weights, self.opt, k), torch.zeros(window, k, device=self.device), k,
                        buffers=buffers)


def check_packable(net: TorchNetwork, x: torch.Tensor, members: int, name: str) -> None:
    """A packed run stacks its members' weights and runs the model under ``torch.func.vmap``: try one training
    pass of two samples, and refuse in one line what vmap cannot do (batch norm's running statistics, which
    every member would update in place, are the usual cause). The model's buffers are put back after."""
    saved = [b.clone() for b in net.model.buffers()]
    weights = [w.unsqueeze(0).expand(members, *w.shape).clone().requires_grad_()
               for w in net.initialize(seed=0, device=x.device)]
    try:
        with torch.enable_grad():
            net(x[:, :2], weights).float().sum().backward()
    except Exception as error:  # noqa: BLE001 - whatever vmap refuses, said in one line
        raise ModelError(f"arch.name={name!r} cannot be packed (torch.func.vmap over the members' weights: "
                         f"{type(error).__name__}: {str(error).splitlines()[0][:160]}); run it with "
                         f"sweep.pack=false") from None
    finally:
        with torch.no_grad():
            for buffer, value in zip(net.model.buffers(), saved):
                buffer.copy_(value)


def run_device(name: str, world: int) -> torch.device:
    device = resolve_device(name)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get(environment.LOCAL_RANK, "0")))
        torch.cuda.set_device(device)
    elif device.type == "cuda":  # an explicit index: the prefetch thread has its own current device
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@functools.cache
def say_once(note: str) -> None:
    """A note that holds for every run of a sweep, logged by its first run in each process only."""
    log.info(note)
