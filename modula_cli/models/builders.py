"""Architecture registry: ``arch.name`` → a function of the arch config and the dataset, and the kind of
dataset it reads.

A new architecture is one function here plus one YAML file in ``configs/arch/``, or, without touching the
package, one function in the user's own file named by import path (``arch.name: my_models:my_mlp``,
docs/extending.md).
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ..data import DATASETS, cause_text
from ..nn import GPT, Module, ResMLP, ResNet, StandardGPT, layer_roles
from ..nn.torch_network import TorchNetwork
from ..plumbing.settings import typed
from .config import ArchConfig
from ..plumbing.user_code import import_function, is_import_path
from .variant import Variant, apply_variant

DATA_KINDS = ("language", "image")


def gpt(arch: Any, data: Any, variant: Variant) -> Module:
    return GPT(vocab_size=data.vocab_size, context=data.context, num_heads=arch.heads, width=arch.width,
               depth=arch.depth, blocks_mass=arch.blocks_mass, attention_third=variant.attention_third)


def standard_gpt(arch: Any, data: Any, variant: Variant) -> Module:
    return StandardGPT(vocab_size=data.vocab_size, context=data.context, num_heads=arch.heads, width=arch.width,
                       depth=arch.depth, residual_scale=arch.get("residual_scale") or 1.0)


def resmlp(arch: Any, data: Any, variant: Variant) -> Module:
    return ResMLP(width=arch.width, depth=arch.depth, block_depth=arch.block_depth,
                  input_dim=math.prod(data.input_shape), output_dim=data.num_classes, blocks_mass=arch.blocks_mass)


def resnet(arch: Any, data: Any, variant: Variant) -> Module:
    return ResNet(width=arch.width, depth=arch.depth, block_depth=arch.block_depth,
                  in_channels=data.input_shape[0], num_classes=data.num_classes, blocks_mass=arch.blocks_mass,
                  kernel_size=arch.kernel_size)


@dataclass(frozen=True)
class Architecture:
    build: Callable[[Any, Any, Variant], Module]  # a user's function takes (arch, data): see ``architecture``
    data_kind: str | None  # the dataset kind it reads: "language" or "image" (None: any, checked by shape)


ARCHITECTURES: dict[str, Architecture] = {
    "gpt": Architecture(gpt, "language"), "standard_gpt": Architecture(standard_gpt, "language"),
    "resmlp": Architecture(resmlp, "image"), "resnet": Architecture(resnet, "image"),
}


class ModelError(ValueError):
    """An architecture that cannot be built for this dataset; its message is one line naming the cause."""


def import_builder(path: str) -> Callable[[Any, Any], Module | nn.Module]:
    """``package.module:function`` → the function, importable from the working directory or PYTHONPATH."""
    return import_function(path, "arch.name", ModelError)


def architecture(name: str) -> Architecture:
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    if is_import_path(name):
        builder = import_builder(name)
        # The variant's structural choices are the builder's own; its atom-level ones apply to any network.
        return Architecture(lambda arch, data, variant: builder(arch, data), None)
    raise ModelError(f"unknown arch {name!r}; allowed: {', '.join(ARCHITECTURES)}, or an import path "
                     f"package.module:function of your own")


def declared_kind(arch: Any) -> str | None:
    """The data kind an architecture reads: a built-in one's, or what a user's YAML declares as
    ``data_kind`` (None: undeclared or not a kind, which validation reports)."""
    if arch.name in ARCHITECTURES:
        return ARCHITECTURES[arch.name].data_kind
    kind = typed(ArchConfig, arch).data_kind if is_import_path(str(arch.name)) else None
    return kind if kind in DATA_KINDS else None


def data_kind_problem(arch: Any, data_name: str, data_kind: str) -> str | None:
    """``arch=… needs an image dataset (cifar10), got data=shakespeare``, or None when the kinds agree."""
    wanted = declared_kind(arch)
    if wanted is None or wanted == data_kind:
        return None
    fitting = ", ".join(n for n, d in DATASETS.items() if d.kind == wanted)
    article = "an" if wanted[0] in "aeiou" else "a"
    return f"arch={arch.name} needs {article} {wanted} dataset ({fitting}), got data={data_name}"


def _builder_arch(arch: Any) -> Any:
    """The arch config without ``data_kind``: modula-sweep reads it, the builder need not see it."""
    if not isinstance(arch, DictConfig) or "data_kind" not in arch:
        return arch
    values = OmegaConf.to_container(arch, resolve=True)  # resolved here, where interpolations can be
    values.pop("data_kind")
    copy = OmegaConf.create(values)
    OmegaConf.set_struct(copy, bool(OmegaConf.is_struct(arch)))  # a misspelt key still raises
    return copy


def build_model(arch: Any, data: Any, variant: Variant | None = None) -> Module:
    """The network for this arch config, dataset and variant (default: modular); a user's function is checked
    for its type and, by a two-sample forward pass on the CPU, for shapes that fit the dataset. A user's function
    that returns a plain ``torch.nn.Module`` gets it wrapped as a ``TorchNetwork`` (each seed's weights from the
    function called again under that seed)."""
    entry = architecture(arch.name)
    variant = variant or Variant()
    if problem := data_kind_problem(arch, data.name, data.kind):
        raise ModelError(problem)
    builder_arch = _builder_arch(arch)

    def build() -> Module | nn.Module:
        try:
            return entry.build(builder_arch, data, variant)
        except ModelError:
            raise
        except Exception as error:  # noqa: BLE001 - a user's builder may fail in any way: one line, then stop
            if entry.data_kind is not None:
                raise
            raise ModelError(_build_failure(arch, data, error)) from error

    net = build()
    if isinstance(net, nn.Module):
        shape = typed(ArchConfig, arch) if isinstance(arch, DictConfig) else ArchConfig()
        try:
            net = TorchNetwork(build, model=net, readout=shape.readout, logits=output_size(data),
                               targets=shape.targets_keyword)
        except ValueError as error:  # arch.targets_keyword names no parameter of its forward
            raise ModelError(str(error)) from None
    elif not isinstance(net, Module):
        raise ModelError(f"arch.name={arch.name!r} returned {type(net).__name__}, neither a torch.nn.Module nor a "
                         f"modula_cli.nn.Module (return your torch model, or build one from modula_cli.nn's atoms)")
    else:
        apply_variant(net, variant)
    if entry.data_kind is None:
        check_fits(net, arch.name, data)
    return net


def output_size(data: Any) -> int:
    """The logits a sample's output has: the vocabulary's size or the number of classes."""
    return data.vocab_size if data.kind == "language" else data.num_classes


def _build_failure(arch: Any, data: Any, error: Exception) -> str:
    """A user's builder raised: name it, the data it was given and the error; an attribute the dataset lacks
    usually means the other kind of data, which a declared ``data_kind`` would have caught before launch."""
    line = f"arch.name={arch.name!r} failed to build for data={data.name} ({data.kind} data): {cause_text(error)}"
    if isinstance(error, AttributeError) and declared_kind(arch) is None:
        other = next(k for k in DATA_KINDS if k != data.kind)
        line += f"; if it reads only {other} data, declare data_kind: {other} in its YAML"
    return line


def check_fits(net: Module, name: str, data: Any, samples: int = 2) -> None:
    """Run ``samples`` blank inputs of the dataset's shape through ``net``; its output must be the logits:
    (B, T, vocab) for language, (B, classes) for images."""
    if data.kind == "language":
        x, expected = torch.zeros(samples, data.context, dtype=torch.long), (samples, data.context, data.vocab_size)
        symbols = ((samples, "B"), (data.context, "T"))
    else:
        x, expected = torch.zeros(samples, *data.input_shape), (samples, data.num_classes)
        symbols = ((samples, "B"),)
    try:
        with torch.no_grad():
            y = net(x, net.initialize(seed=0))
    except Exception as error:  # noqa: BLE001
        raise ModelError(f"arch.name={name!r} does not fit data={data.name} (input {tuple(x.shape)}): "
                         f"{type(error).__name__}: {str(error).splitlines()[0]}") from None
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != expected:
        shape = _symbolic(tuple(y.shape), symbols) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ModelError(f"arch.name={name!r}: expected {_symbolic(expected, symbols)} logits for {data.name} "
                         f"(input {_symbolic(tuple(x.shape), symbols)}), got {shape}{fit_hint(net, y, expected, data)}")


def fit_hint(net: Module, output: Any, expected: tuple[int, ...], data: Any) -> str:
    """What to change when a network's output is not the logits the data needs ("" when there is no telling)."""
    size = "data.vocab_size" if data.kind == "language" else "data.num_classes"
    if not isinstance(output, torch.Tensor):
        return ("; return the logits: a tensor, a tuple whose first item is the logits (e.g. (logits, loss)) or an "
                "object with .logits")
    got = tuple(output.shape)
    if data.kind == "language" and len(got) == 3 and got[0] == expected[0] and got[1] == 1 != expected[1]:
        keyword = getattr(net, "targets", None)
        return ("; it returns the last position's logits alone (as nanoGPT's forward does without targets): every "
                "position's are needed, " + (f"even when given {keyword}=" if keyword else
                                             "so name the parameter of its forward that takes the targets in the arch "
                                             "YAML (targets_keyword: targets), or return them from its forward"))
    if got[:-1] == expected[:-1] and got[-1] != expected[-1]:
        return f"; its readout has {got[-1]} outputs: build it with {size} ({expected[-1]})"
    if data.kind == "language" and got == (expected[0], expected[2]):
        return "; it returns one prediction per sequence: a language model predicts at every position (B, T, …)"
    if data.kind == "language" and got == (expected[0] * expected[1], expected[2]):
        return "; it flattens batch and positions: return the logits as (B, T, vocabulary)"
    return ""


def _symbolic(shape: tuple[int, ...], symbols: tuple[tuple[int, str], ...]) -> str:
    """``(2, 256, 65)`` → ``(B, T, 65)``: the batch and context sizes by name where they stand, as a user thinks
    of them (``symbols``: each leading position's size and name)."""
    shown = [name if index < len(symbols) and size == symbols[index][0] else str(size)
             for index, (size, name) in enumerate(zip(shape, [n for _, n in symbols] + [""] * len(shape)))]
    return f"({', '.join(shown)})"


@functools.cache
def builtin_roles() -> dict[str, tuple[str, ...]]:
    """Each built-in architecture's layer roles (the same at every size: read off a tiny instance)."""
    tiny = {"gpt": GPT(vocab_size=3, context=2, num_heads=1, width=2, depth=1),
            "standard_gpt": StandardGPT(vocab_size=3, context=2, num_heads=1, width=2, depth=1),
            "resmlp": ResMLP(width=2, depth=1, block_depth=1, input_dim=2, output_dim=2),
            "resnet": ResNet(width=2, depth=1, block_depth=1, in_channels=1, num_classes=2)}
    return {name: tuple(dict.fromkeys(layer_roles(net))) for name, net in tiny.items()}


def role_problems(key: str, roles: list[str], present: tuple[str, ...] | None) -> list[str]:
    """``optim.manifold.free=[outptu]``: every listed role must be a layer role of this network (``present``)
    or of a built-in architecture (so one list serves them all; a role the network lacks selects nothing).
    ``present`` None: a user's network not built yet, whose roles are checked once it is. (That ``roles`` is
    a list of names is the schema's check, ``OptimConfig.manifold_*``.)"""
    if present is None:
        return []
    known = dict.fromkeys(role for roles in builtin_roles().values() for role in roles)
    known.update(dict.fromkeys(present))
    unknown = [role for role in roles if role not in known]
    if not unknown:
        return []
    guesses = [guess for role in unknown for guess in difflib.get_close_matches(role, list(known), n=1)]
    hint = f"; did you mean {', '.join(guesses)}?" if guesses else ";"
    return [f"{key}: no layer has the role {', '.join(map(repr, unknown))}{hint} roles: {', '.join(known)}"]
