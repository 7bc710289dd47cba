"""Which reading of the modular-norm paper a run trains (``variant=modular|paper``; docs/variants.md).

``paper`` (the default, chosen by measured loss and transfer: docs/variants.md) is what the authors' reference
code (jxbz/modula at commit eccf3cca, the code the paper's figures came from) computes; ``modular`` is this
project's earlier reading of the paper and what every earlier run trained. The same module tree, masses and
sensitivities, but five details differ, and for a plain (unnormed) optimiser one of them changes what a
learning rate means. Each difference is one field here, so a single one can be switched to measure
its effect (``variant=paper variant.scales=weights``). The paper variant's YAML also sets
``optim.normed.power_iterations: 1`` (the reference's one warm-started step per update).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

if TYPE_CHECKING:
    from ..nn import Module


@dataclass(frozen=True)
class Variant:
    attention_third: str = "output"  # the attention's 1/3: on its output | on each of q, k, v ("qkv")
    scales: str = "weights"          # atoms' constant factors: folded into the weights | applied in "forward"
    embed_rows: str = "decay"        # embedding rows: shrunk by weight decay only | reset to RMS 1 every step ("unit")
    conv_normalize: str = "kernel"   # normed Conv2D: whole kernel by its largest slice | each "slice" on its own
    extra_step: bool = False         # one more iteration after train.steps, at learning rate 0 (the reference's loop)




def allowed_values() -> dict[str, tuple]:
    """Each setting's allowed values (read when a config is checked: this module itself imports no torch, so
    that the command line's schema can use ``Variant``)."""
    from ..nn.compounds import ATTENTION_THIRDS

    return {"attention_third": ATTENTION_THIRDS, "scales": ("weights", "forward"), "embed_rows": ("decay", "unit"),
            "conv_normalize": ("kernel", "slice"), "extra_step": (False, True)}


VARIANTS = {"modular": Variant(),
            "paper": Variant(attention_third="qkv", scales="forward", embed_rows="unit", conv_normalize="slice",
                             extra_step=True)}
# What every run was before variants existed: its fingerprint, folder names and summaries stay as they were.
HISTORICAL = "modular"
BUILT_IN_NETWORKS = ("gpt", "resmlp", "resnet")  # the paper's networks, which the reference code defines


def variant_problems(node: Any) -> list[str]:
    """One line per bad field of the ``variant`` config (a missing node is the modular variant)."""
    if node is None:
        return []
    problems, settings = [], allowed_values()
    for key, value in OmegaConf.to_container(node, resolve=True).items():
        allowed = settings.get(key)
        if allowed is None:
            problems.append(f"variant.{key} is not a setting; the variant's settings: {', '.join(settings)}")
        elif value not in allowed or isinstance(value, bool) != isinstance(allowed[0], bool):
            problems.append(f"variant.{key}={value!r}; allowed: {', '.join(map(str, allowed))}")
    return problems


NOT_APPLICABLE = "none"  # a plain torch model's variant: neither reading applies to its own code


def applies(arch_name: Any) -> bool:
    """Whether a variant means anything for ``arch.name``: the paper's networks and a user's network of this
    library's atoms, not a plain torch model (its builder's files never import modula_cli:
    ``plumbing/user_code.py``)."""
    from ..plumbing.user_code import plain_torch_builder  # torch-free: reads the builder's files without importing them

    return not (isinstance(arch_name, str) and ":" in arch_name and plain_torch_builder(arch_name))


def _arch_name(cfg: Any) -> Any:
    arch = cfg.get("arch") if hasattr(cfg, "get") else None
    return arch.get("name") if hasattr(arch, "get") else None


def variant_of(cfg: Any) -> Variant:
    """The run's variant; a config written before variants existed trained the modular one, and so does a plain
    torch model whatever the config says (neither reading applies to it: no LR-0 step, no folder suffix)."""
    node = cfg.get("variant") if hasattr(cfg, "get") else None
    if node is None or not applies(_arch_name(cfg)):
        return Variant()
    return Variant(**(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node))


def iterations(steps: int, variant: Variant) -> int:
    """The training iterations of a run of ``train.steps=steps``: and in the paper variant one more at LR 0, as
    its reference loop runs steps + 1 (the schedule is 0 past the end)."""
    return steps + int(variant.extra_step)


def variant_name(variant: Variant) -> str:
    """``modular``, ``paper``, or ``custom`` for a mixture (the report then names the fields that differ)."""
    return next((name for name, known in VARIANTS.items() if known == variant), "custom")


def name_of(cfg: Any) -> str:
    """The variant's name in a run's identity and the report's series: ``none`` for a plain torch model."""
    return variant_name(variant_of(cfg)) if applies(_arch_name(cfg)) else NOT_APPLICABLE


def folder_suffix(variant: Variant) -> str:
    """A sweep folder's suffix: none for the modular variant (so the folders of sweeps made before variants
    existed stay theirs), ``_paper``, or ``_custom-<hash>``: a sweep of one variant never retrains another's
    runs in place."""
    name = variant_name(variant)
    if name == "custom":
        digest = hashlib.sha256(json.dumps(differences(variant), sort_keys=True).encode()).hexdigest()[:6]
        return f"_custom-{digest}"
    return "" if name == "modular" else f"_{name}"


def differences(variant: Variant) -> dict[str, Any]:
    """The fields that differ from the modular variant (what a run's fingerprint adds)."""
    modular = asdict(VARIANTS[HISTORICAL])
    return {key: value for key, value in asdict(variant).items() if modular[key] != value}


def apply_variant(net: Module, variant: Variant) -> Module:
    """Set the atom-level differences on every atom of ``net`` (the attention's is set when it is built).

    Atoms with a Gaussian initialisation (``init_std``: the standard GPT) have no constant factor and no
    sphere: the reference code has no such atoms, so they are left as they are."""
    from ..nn import Conv2D, Embed, MatrixAtom  # here: the config checks read this module without torch

    for atom in net.atoms():
        modular_init = getattr(atom, "init_std", None) is None
        atom.forward_scale = atom.natural_scale if variant.scales == "forward" else 1.0  # 1 for Gaussian atoms
        if isinstance(atom, Embed):
            atom.renormalize_each_step = variant.embed_rows == "unit" and modular_init
        if isinstance(atom, MatrixAtom):
            atom.normalize_slices = variant.conv_normalize == "slice" and isinstance(atom, Conv2D)
    return net


def explain_scope(arch_name: str, variant: Variant, net: Any = None) -> str | None:
    """What a non-modular variant changes in an architecture that is not one of the paper's networks (None for
    those and for the modular variant): logged once per run, so a user knows what ``paper`` meant. ``net``, the
    built network: only the parts it has are named (no word on attention for a network without any)."""
    if variant == VARIANTS[HISTORICAL] or arch_name in BUILT_IN_NETWORKS:
        return None
    name = variant_name(variant)
    if arch_name == "standard_gpt":
        return (f"variant={name} with arch=standard_gpt: its Gaussian-initialised layers have no constant factors "
                f"and no embedding sphere, so only the training loop's differences apply (final LR-0 step, power "
                f"iterations); the reference code has no standard GPT")
    from ..nn import Conv2D, Embed, FunctionalAttention  # here: the config checks import this module without torch
    from ..nn.torch_network import TorchNetwork

    if isinstance(net, TorchNetwork):  # a builder that imports modula_cli yet returns a torch model
        return (f"variant={name} with arch.name={arch_name}, a torch.nn.Module: the model's code is its own, so only "
                f"the training loop's differences apply (a final LR-0 step; variant=modular leaves it out)")

    kinds = {type(module) for module in net.walk()} if net is not None else None

    def has(kind: type) -> bool:
        return kinds is None or any(issubclass(k, kind) for k in kinds)

    parts = [f"constant factors {'in the forward pass' if variant.scales == 'forward' else 'in the weights'}"]
    if has(Embed):
        parts.append(f"embedding rows {'reset to RMS 1 every step' if variant.embed_rows == 'unit' else 'decayed'}")
    if has(Conv2D):
        parts.append(f"Conv2D normalised {'per slice' if variant.conv_normalize == 'slice' else 'per kernel'}")
    attention = (" Where attention puts its 1/3 is your builder's choice: modula_cli.nn.Attention(..., "
                 "third='qkv') is the reference's." if variant.attention_third == "qkv" and has(FunctionalAttention)
                 else "")
    return (f"variant={name} with arch.name={arch_name}: applied to its atoms ({', '.join(parts)}) and to the loop "
            f"({'a final LR-0 step' if variant.extra_step else 'no extra step'}).{attention}")
