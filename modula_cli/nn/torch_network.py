"""A plain ``torch.nn.Module`` as a network of this library: each of its parameters an atom, its forward pass
``torch.func.functional_call`` with the weight list (docs/extending.md, "Your PyTorch model, unchanged").

The model keeps its own code, initialisation and buffers; what this adds is the weight list the optimiser and
the checkpoints work on, and what a per-parameter rule (μP, Muon) needs to know of each parameter: the module
that holds it, its fan-out and fan-in, and whether it is an embedding table. There is no tree of masses and
sensitivities, so the modes that need the modular norm (normed, dualized, manifold) do not apply
(``Mode.needs_modular_norm``).

The model runs in train mode when gradients are on (training steps) and in eval mode when they are off
(evaluation, the shape check), so dropout and batch norm behave as in the user's own loop. A forward that takes
the targets and returns ``(logits, loss)`` (nanoGPT's ``forward(idx, targets=None)``, which without targets
returns the last position's logits alone) is called with targets, so that it returns every position's logits;
the loss is this library's, computed from them (``targets_keyword``).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .atom import Atom
from .module import Module
from .roles import layer_roles

MATRIX_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
# a parameter path's block index, its first number (h.3.mlp.0.weight → h.*.mlp.0.weight: a Sequential's own
# positions inside the block are layers of their own)
BLOCK_INDEX = re.compile(r"(?:(?<=\.)|^)\d+(?=\.)")
AUTO = "auto"  # arch.targets_keyword's default: read off the model's forward


def shared_roles(net: Module) -> list[str]:
    """Each atom's role, shared by the copies of one block: a module-algebra network's roles are already; a plain
    torch model's are its parameter paths, whose block indices are masked here (``h.*.attn.c_attn.weight``)."""
    roles = layer_roles(net)
    return [BLOCK_INDEX.sub("*", role, count=1) for role in roles] if isinstance(net, TorchNetwork) else roles


def hf_conv1d(module: nn.Module) -> bool:
    """Hugging Face's ``Conv1D`` (GPT-2): a linear layer whose weight is stored (fan-in, fan-out)."""
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")


def parameter_fans(module: nn.Module, local_name: str, shape: torch.Size) -> tuple[int, int]:
    """(fan-out, fan-in) of one parameter: a linear or convolution weight's output and input size (its kernel
    flattened into the input: the matrix Muon orthogonalises), an embedding table's width and number of rows
    (its input is one of them), a vector's length and 1; any other tensor of two or more dimensions as mup reads
    it, dimension 0 out and the rest in."""
    if len(shape) < 2:
        return (shape[0] if len(shape) else 1), 1
    if isinstance(module, nn.Embedding) and local_name == "weight":
        return shape[1], shape[0]
    if hf_conv1d(module) and local_name == "weight":
        return shape[1], shape[0]
    return shape[0], math.prod(shape[1:])


class TorchParameter(Atom):
    """One parameter of a plain model: its path (``transformer.h.0.attn.c_attn.weight``, its role), the module
    that holds it, and its fans. ``forward_scale`` multiplies it on its way into the model (μP's readout)."""

    # where it sits in the model: the optimiser's maps never read these (equal parameters share their calls)
    map_labels: ClassVar[tuple[str, ...]] = ("module_path", "module", "local_name")

    def __init__(self, path: str, module_path: str, module: nn.Module, local_name: str, shape: torch.Size):
        super().__init__(mass=1.0)
        self.role = path
        self.module_path, self.module, self.local_name = module_path, module, local_name
        self.shape = tuple(shape)
        self.fan_out, self.fan_in = parameter_fans(module, local_name, shape)
        self.embedding = isinstance(module, nn.Embedding) and local_name == "weight"
        self.transposed = hf_conv1d(module) and local_name == "weight"  # stored (fan-in, fan-out)

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) >= 2

    def describe(self) -> str:
        return f"{self.role} {tuple(self.shape)}"

    def as_matrix(self, weight: Tensor) -> Tensor:
        """The weight as (…, fan-out, fan-in): a kernel flattened, a stored-transposed one turned (… : a packed
        run's member axis)."""
        lead = weight.shape[:weight.ndim - len(self.shape)]
        if self.transposed:
            return weight.mT
        return weight.reshape(*lead, self.fan_out, self.fan_in)

    def from_matrix(self, matrix: Tensor) -> Tensor:
        if self.transposed:
            return matrix.mT
        return matrix.reshape(*matrix.shape[:-2], *self.shape)

    def apply(self, x: Any, weight: Tensor) -> Any:
        """The holding module with this parameter at ``weight`` and its other direct parameters at zero: for a
        module linear in each parameter (linear, convolution, embedding, norm gains), this parameter's own
        contribution to the output (what the coordinate check's ``own_delta_rms`` measures)."""
        zeros = {name: torch.zeros(p.shape, dtype=weight.dtype, device=weight.device)
                 for name, p in self.module.named_parameters(recurse=False)}
        zeros[self.local_name] = weight
        with torch.no_grad():
            return torch.func.functional_call(self.module, zeros, (x,))

    def atom_norm(self, weight: Tensor) -> float:
        """RMS → RMS operator norm of a matrix (its kernel flattened), the largest entry of a vector."""
        if not self.is_matrix:
            return float(weight.abs().max())
        sigma = torch.linalg.matrix_norm(self.as_matrix(weight.float()), ord=2)
        return float(sigma * math.sqrt(self.fan_in / self.fan_out))

    def matrices(self, weight: Tensor) -> Tensor | None:
        return self.as_matrix(weight).unsqueeze(-3) if self.is_matrix else None


class TorchNetwork(Module):
    """A plain ``torch.nn.Module`` as a network: weights in parameter order (a tied parameter once), forward by
    ``functional_call`` (packed: under ``torch.func.vmap``). ``factory`` builds the model afresh: each seed's
    initial weights are those of a model built under that seed."""

    def __init__(self, factory: Callable[[], nn.Module], model: nn.Module | None = None,
                 readout: str | None = None, logits: int | None = None, targets: str | None = AUTO):
        self.factory = factory
        self.model = model if model is not None else factory()
        self.readout_name = readout  # arch.readout: the module the user named as the readout, if any
        self.logits = logits  # the number of logits a sample's output has (vocabulary or classes)
        self.targets = targets_keyword(self.model, targets)  # its forward's keyword for the targets, if it has one
        self.input_scales: dict[str, float] = {}  # module path → the factor its input is multiplied by
        modules = dict(self.model.named_modules())
        self.names: list[str] = []
        atoms = []
        for path, parameter in self.model.named_parameters():
            module_path, _, local = path.rpartition(".")
            self.names.append(path)
            atoms.append(TorchParameter(path, module_path, modules[module_path], local, parameter.shape))
        self.children = tuple(atoms)
        self.tied = tied_parameters(self.model)
        release_parameters(self.model)
        self._device: torch.device | None = None

    # --- the module-algebra view: flat, no masses to split ------------------------------------------------

    @property
    def mass(self) -> float:
        return float(len(self.children))

    @property
    def sensitivity(self) -> float:
        return 1.0

    def _shares(self, target: float) -> list[float]:
        return [target] * len(self.children)  # each parameter on its own: weight decay is plain decay

    def norm(self, w: Sequence[Tensor]) -> float:
        return max((atom.atom_norm(piece) for atom, piece in zip(self.children, w)), default=0.0)

    def describe(self) -> str:
        return self.name or type(self.model).__name__

    def parameters_of(self) -> Iterator[TorchParameter]:
        yield from self.children

    # --- weights and buffers -----------------------------------------------------------------------------

    def initialize(self, seed: int = 0, device: torch.device | str | None = None,
                   dtype: torch.dtype = torch.float32) -> list[Tensor]:
        """The parameters of the model built under ``torch.manual_seed(seed)``: the user's own initialisation,
        the same for a seed on any device."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self.factory()
        drawn = dict(model.named_parameters())
        return [drawn[name].detach().to(device=device, dtype=dtype).clone() for name in self.names]

    def buffers(self) -> list[Tensor]:
        """The model's floating-point buffers (batch norm's running statistics): a run's checkpoint keeps them."""
        return [b for b in self.model.buffers() if b.is_floating_point()]

    def to_device(self, device: torch.device) -> None:
        """The model's buffers onto ``device`` (its parameters are placeholders: the weights come with each call)."""
        if self._device != device:
            for module in self.model.modules():
                for name, buffer in list(module.named_buffers(recurse=False)):
                    setattr(module, name, buffer.to(device))  # a tensor set on a buffer's name stays that buffer
            self._device = device

    # --- the function -----------------------------------------------------------------------------------

    def scale_input(self, module_path: str, factor: float) -> None:
        """Multiply what the module at ``module_path`` receives by ``factor`` in every forward pass (μP's tied
        readout: ``mup``'s MuSharedReadout divides its input by the width multiplier, leaving the shared table, and
        so the embedding, as it is). A forward pre-hook on the user's module: their code is not touched."""
        if module_path not in self.input_scales:
            module = self.model.get_submodule(module_path)
            module.register_forward_pre_hook(
                lambda _, inputs: (inputs[0] * self.input_scales[module_path], *inputs[1:]))
        self.input_scales[module_path] = factor

    def forward(self, x: Any, w: Sequence[Tensor]) -> Tensor:
        if len(w) != len(self.children):
            raise ValueError(f"{self.describe()} expects {len(self.children)} weight tensors, got {len(w)}")
        self.to_device(x.device)
        self.model.train(torch.is_grad_enabled())
        params = {name: atom.effective(piece) for name, atom, piece in zip(self.names, self.children, w)}
        packed = bool(w) and w[0].ndim == len(self.children[0].shape) + 1
        if not packed:
            return self._logits(params, x)
        return torch.func.vmap(self._logits, randomness="different")(params, x)

    def _logits(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        extra = {self.targets: placeholder_targets(x)} if self.targets else None
        return logits_of(torch.func.functional_call(self.model, params, (x,), extra))


def targets_keyword(model: nn.Module, setting: str | None) -> str | None:
    """The keyword through which ``model``'s forward takes the targets (``arch.targets_keyword``), or None when it
    is not given them. ``auto``: ``targets`` when its forward has a parameter of that name (nanoGPT's), else none.
    ValueError, one line, for a name its forward does not take."""
    parameters = inspect.signature(model.forward).parameters
    if setting == AUTO:
        return "targets" if "targets" in parameters else None
    if setting and setting not in parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        raise ValueError(f"arch.targets_keyword={setting!r}: {type(model).__name__}.forward takes no parameter of that "
                         f"name (its parameters: {', '.join(parameters)}); name one of them, or null")
    return setting or None


def placeholder_targets(x: Tensor) -> Tensor:
    """Targets of the right shape and type for a forward that wants them only to return every position's logits:
    token ids of the input's shape (language), one class per sample (images). Their value does not matter: the
    model's own loss of them is not used."""
    if not x.is_floating_point():
        return torch.zeros_like(x)
    return torch.zeros(x.shape[0], dtype=torch.long, device=x.device)


def logits_of(output: Any) -> Tensor:
    """The logits of a model's output: the tensor itself, or the ``.logits`` of an output object (Hugging Face)."""
    logits = getattr(output, "logits", output)
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
        logits = output[0]
    return logits


def release_parameters(model: nn.Module) -> None:
    """Replace the model's own parameters by placeholders of the same shape on the meta device (no memory): every
    forward pass brings its weights (``functional_call``), so a large model is not held twice. A parameter that
    several modules share keeps one placeholder, so ``functional_call`` still sees the tie."""
    placeholders: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, parameter in list(module.named_parameters(recurse=False, remove_duplicate=False)):
            if id(parameter) not in placeholders:
                placeholders[id(parameter)] = nn.Parameter(torch.empty_like(parameter, device="meta"),
                                                           requires_grad=parameter.requires_grad)
            setattr(module, name, placeholders[id(parameter)])


def tied_parameters(model: nn.Module) -> dict[str, list[str]]:
    """Each parameter that more than one module holds (GPT-2's token embedding and readout): its first name →
    every name it has."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return {paths[0]: paths for paths in names.values() if len(paths) > 1}
