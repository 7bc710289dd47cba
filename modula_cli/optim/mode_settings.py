"""Each mode's settings, a typed block of the ``optim`` config that only its mode reads (``optim.mup.base_width``,
``optim.muon.scale``, ``optim.manifold.iterations``, ``optim.normed.power_iterations``), and the orthogonalisation's
(``optim.ortho.method``: the dualized map's, which the manifold mode's free layers and Muon's hidden matrices use
too). Apart from the modes (``modes/``) because the command line checks them before torch loads.

Before the blocks these were flat settings (``optim.mup_base_width``). ``FLAT_NAMES`` keeps those names: a run's
fingerprint and its tables' settings still use them, so no finished run changes its identity, and the command
line still takes them for a while (``OLD_SPELLINGS``), saying the new spelling once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from ..plumbing.settings import setting

# nn/orthogonalize.py's methods and iteration dtypes, named here too: the command line checks them without torch
ORTHO_METHODS = ("polar_express", "muon", "cubic", "svd")
ORTHO_DTYPES = ("auto", "float32", "bfloat16")
MUON_SCALES = ("original", "match_rms_adamw", "spectral")  # modes/muon.py's muon_scale
# μP's depth recipes (modes/mup_depth.py): the exponent α of each residual branch's multiplier (L / L₀)^-α
DEPTH_RECIPES = {"none": 0.0, "depth_mup": 0.5, "completep": 1.0}
# Manifold mode's defaults (measured in docs/manifold.md): the temperatures (readout, attention
# scores) free, every other layer on its manifold with a learned radius.
MANIFOLD_FREE = ["output", "attn.q", "attn.k"]
ROLES = "layer roles, e.g. [output, attn.q]"  # what the manifold lists hold (``nn.layer_roles``)
MANIFOLD_SCALED = ["embed.token", "embed.position", "attn.v", "attn.out", "mlp.in", "mlp.out", "input", "hidden"]

# optim.<block>: its settings (``OptimConfig`` holds one field per block, built from here) and its one-line doc
BLOCKS: dict[str, type] = {}
BLOCK_DOCS: dict[str, str] = {}
# Each block setting's flat name under optim (``<block>_<setting>``): a fingerprint and a table's settings name it so,
# as runs were first fingerprinted before the blocks (so these names never change), and the old spellings too.
FLAT_NAMES: dict[str, str] = {}
BLOCK_PATHS: dict[str, str] = {}  # FLAT_NAMES reversed: mup_base_width → mup.base_width
FIRST_FLAT_NAMES = {"normed.power_iterations": "power_iterations", "ortho.method": "ortho",
                    "ortho.steps": "ortho_steps", "ortho.dtype": "ortho_dtype"}  # the exceptions to <block>_<setting>


def settings_block(name: str, doc: str) -> Callable[[type], type]:
    """Register a dataclass of ``setting(...)`` fields as the block ``optim.<name>``: ``OptimConfig`` holds it,
    the config's check checks it, and ``config/identity.py`` fingerprints it in the runs of the mode whose
    ``own_block`` it is (left out of every other mode's). A new mode's block needs nothing more."""
    def register(schema: type) -> type:
        schema = dataclass(schema)
        flat = {f"{name}.{f.name}": FIRST_FLAT_NAMES.get(f"{name}.{f.name}", f"{name}_{f.name}")
                for f in dataclasses.fields(schema)}
        if name in BLOCKS or (taken := set(flat.values()) & set(BLOCK_PATHS)):
            raise ValueError(f"settings block optim.{name}: " + (f"{name} is a block already" if name in BLOCKS else
                             f"its flat names {sorted(taken)} are another block's (a fingerprint would mix them)"))
        if hasattr(sys.modules.get("modula_cli.optim.config"), "OptimConfig"):  # made from the blocks declared so far
            raise RuntimeError(f"settings block optim.{name} is declared after modula_cli.optim.config was imported; "
                               f"declare it before (as modes/ and the command line import this module first)")
        BLOCKS[name], BLOCK_DOCS[name] = schema, doc
        FLAT_NAMES.update(flat)
        BLOCK_PATHS.update({flat_name: dotted for dotted, flat_name in flat.items()})
        return schema
    return register


@settings_block("normed", "the normed mode's settings")
class NormedSettings:
    power_iterations: int = setting(2, "normed: warm-started power-iteration steps per update", minimum=1)


@settings_block("ortho", "the orthogonalisation of the dualized map (manifold's free layers and Muon's hidden "
                         "matrices use it too)")
class OrthoSettings:
    method: str = setting("polar_express", "dualized (and manifold's free layers): polar_express | muon | cubic "
                                           "| svd", choices=ORTHO_METHODS)
    steps: int | None = setting(None, "iterations of the polar factor; null: the method's default", minimum=1)
    dtype: str = setting("auto", "the iteration's dtype (Muon's too): auto (bfloat16 on CUDA, else float32) | "
                                 "float32 | bfloat16", choices=ORTHO_DTYPES)


@settings_block("manifold", "the manifold mode's settings (docs/manifold.md)")
class ManifoldSettings:
    iterations: int = setting(0, "manifold: most dual-ascent steps per update (0: the projected start; "
                                 "docs/manifold.md)", minimum=0)
    step: float = setting(1.0, "manifold: first multiplier step, decaying linearly to 0", above=0)
    tolerance: float = setting(1e-3, "manifold: a matrix stops once RMS(WᵀA + AᵀW) is below this", above=0)
    warm_start: bool = setting(True, "manifold: start from the previous step's multiplier")
    scaled: list[str] = setting(MANIFOLD_SCALED, "manifold: the roles whose radius is learned", items=ROLES)
    free: list[str] = setting(MANIFOLD_FREE, "manifold: the roles trained off the manifold (dualized)", items=ROLES)


@settings_block("mup", "μP's settings (docs/mup.md)")
class MupSettings:
    base_width: int = setting(32, "mup: the width whose network μP trains exactly as unnormed (every multiplier 1); "
                                  "each layer's LR, initial scale and readout multiplier scale from it (docs/mup.md)",
                              minimum=1)
    readout_zero: bool = setting(False, "mup: the readout starts at zero")
    query_zero: bool = setting(False, "mup: the attention's query starts at zero")
    depth: str = setting("none", "mup: the depth recipe: none (μP for width alone) | depth_mup (residual branches × "
                                 "(L/L₀)^-½, Tensor Programs VI) | completep (× (L/L₀)^-1, Dey et al. 2025), each "
                                 "with its per-layer LR, ε and weight-decay corrections (docs/mup.md)",
                         choices=tuple(DEPTH_RECIPES))
    base_depth: int = setting(1, "mup with optim.mup.depth: the depth at which every depth multiplier is 1 (μP for "
                                 "width, with Adam's ε / m_w); set it to the depth you tune at", minimum=1)


@settings_block("muon", "Muon's settings (docs/own_model.md)")
class MuonSettings:
    scale: str = setting("original", "muon: each hidden matrix's factor: original √max(1, out/in) (Keller Jordan's) "
                                     "| match_rms_adamw 0.2·√max(out, in) (Moonshot's) | spectral √(out/in) (the "
                                     "modular norm's)", choices=MUON_SCALES)
    momentum: float = setting(0.95, "muon: the hidden matrices' Nesterov momentum", minimum=0, below=1)
    ns_steps: int = setting(5, "muon: Newton–Schulz steps (Keller Jordan's quintic)", minimum=1)
    adam_ratio: float = setting(1.0, "muon: the base optimiser's LR (embeddings, readout, gains, biases) / the swept "
                                     "LR (1, chosen at width 64 from 2^-8 … 1: docs/own_model.md)", above=0)


# The blocks whose settings were flat before the blocks (optim.mup_base_width): those spellings are read for a
# release. A later block's settings have none.
FIRST_BLOCKS = ("normed", "ortho", "manifold", "mup", "muon")
OLD_SPELLINGS: dict[str, str] = {f"optim.{flat}": f"optim.{dotted}" for dotted, flat in FLAT_NAMES.items()
                                 if dotted.partition(".")[0] in FIRST_BLOCKS}
OLD_PATHS: dict[str, str] = {old[len("optim."):]: new[len("optim."):] for old, new in OLD_SPELLINGS.items()}


def flat_settings(optim: dict[str, Any]) -> dict[str, Any]:
    """The ``optim`` settings (a plain dict) with each block's settings under its flat name, as a fingerprint and
    a table's settings name them: ``{"mup": {"base_width": 32}}`` → ``{"mup_base_width": 32}``."""
    flat = {key: value for key, value in optim.items() if key not in BLOCKS or not isinstance(value, dict)}
    for block in BLOCKS:
        for key, value in (optim.get(block) or {}).items():
            flat[FLAT_NAMES.get(f"{block}.{key}", f"{block}_{key}")] = value
    return flat


def nested_settings(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat_settings`` undone: ``{"mup_base_width": 32}`` → ``{"mup": {"base_width": 32}}`` (a summary's or a
    table's settings as the ``optim`` config holds them); other keys as they are."""
    dotted = BLOCK_PATHS
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        if key in dotted and not isinstance(value, dict):
            block, _, name = dotted[key].partition(".")
            nested.setdefault(block, {})[name] = value
        else:
            nested[key] = value
    return nested


def new_spelling(key: str) -> str | None:
    """``optim.mup_base_width`` → ``optim.mup.base_width``: the block spelling of a flat setting, or None."""
    return OLD_SPELLINGS.get(key)


def old_spelling_line(key: str) -> str:
    return f"{key} is now {new_spelling(key)}; the old spelling is read until the next release"


def move_old_spellings(optim: DictConfig | dict[str, Any]) -> list[str]:
    """A config file's (or a run's saved config.yaml's) mode settings in their old flat spelling, read into their
    blocks in place: ``mup_base_width: 64`` → ``mup: {base_width: 64}``, ``ortho: svd`` → ``ortho: {method: svd}``.
    One whose block already holds another value than its default (``optim.mup.base_width=128`` on the command line)
    is left where it is, for the config's check to name both (``spelling_conflicts``). The old keys it moved
    (``optim.mup_base_width``), in the config's order."""
    dotted = OLD_PATHS
    old = [key for key in optim if key in dotted and not isinstance(optim[key], Mapping)]
    moved = []
    with open_dict(optim) if OmegaConf.is_config(optim) else contextlib.nullcontext():
        for key in sorted(old, key=lambda k: k not in BLOCKS):  # ortho: svd first: ortho_steps goes into its block
            block, _, name = dotted[key].partition(".")
            value = optim[key]
            if key in BLOCKS:  # the old value took the block's place
                optim[block] = {}
            elif f"optim.{key}" in spelling_conflicts(optim):
                continue
            else:
                del optim[key]
                if not isinstance(optim.get(block), Mapping):
                    optim[block] = {}
            optim[block][name] = value
            moved.append(key)
    return [f"optim.{key}" for key in old if key in moved]


def spelling_conflicts(optim: DictConfig | dict[str, Any]) -> list[str]:
    """Each old flat spelling whose block spelling is set too, to another value than the block's default: two
    values for one setting (``optim.mup_base_width`` and ``optim.mup.base_width``)."""
    dotted = OLD_PATHS
    found = []
    for key in optim:
        if key not in dotted or key in BLOCKS or isinstance(optim[key], Mapping):
            continue
        block, _, name = dotted[key].partition(".")
        held = optim.get(block)
        if isinstance(held, Mapping) and name in held and held[name] not in (_default(block, name), optim[key]):
            found.append(f"optim.{key}")
    return found


def _default(block: str, name: str) -> Any:
    field = next(f for f in dataclasses.fields(BLOCKS[block]) if f.name == name)
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def rewrite_old_spellings(argv: Sequence[str], say: Callable[[str], None]) -> list[str]:
    """Each override of a mode's setting in its old flat spelling in its block's (``optim.mup_base_width=64`` ->
    ``optim.mup.base_width=64``, ``optim.ortho=svd`` -> ``optim.ortho.method=svd``), with one line per spelling
    to ``say``. A config file's are read by ``move_old_spellings`` (the config's check calls it)."""
    rewritten, said = [], set()
    for arg in argv:
        marks = arg[:len(arg) - len(arg.lstrip("+~"))]
        key, eq, value = arg[len(marks):].partition("=")
        new = None if arg.startswith("-") or value.lstrip().startswith("{") else new_spelling(key)
        if new is not None:
            if key not in said:
                say(old_spelling_line(key))
                said.add(key)
            arg = f"{marks}{new}{eq}{value}"
        rewritten.append(arg)
    return rewritten
