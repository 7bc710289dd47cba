"""The ``optim`` config group's schema: configs/optim/*.yaml choose the base optimiser and set what differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from ..plumbing.settings import setting
from .schedule import DECAY_SHAPES, SCHEDULES

OPTIMIZERS = ("sgd", "adam")  # each with its direction in directions.py (DIRECTIONS)
# nn/orthogonalize.py's methods and iteration dtypes, named here too: the command line checks them without torch
ORTHO_METHODS = ("polar_express", "muon", "cubic", "svd")
ORTHO_DTYPES = ("auto", "float32", "bfloat16")
DECAY_ON = ("all", "matrices")  # optim.decay_on: which weights weight decay shrinks
MUON_SCALES = ("original", "match_rms_adamw", "spectral")  # modes/muon.py's muon_scale
# μP's depth recipes (modes/mup_depth.py): the exponent α of each residual branch's multiplier (L / L₀)^-α
DEPTH_RECIPES = {"none": 0.0, "depth_mup": 0.5, "completep": 1.0}

# Manifold mode's defaults (measured in docs/manifold.md): the temperatures (readout, attention
# scores) free, every other layer on its manifold with a learned radius.
MANIFOLD_FREE = ["output", "attn.q", "attn.k"]
ROLES = "layer roles, e.g. [output, attn.q]"  # what the manifold lists hold (``nn.layer_roles``)
MANIFOLD_SCALED = ["embed.token", "embed.position", "attn.v", "attn.out", "mlp.in", "mlp.out", "input", "hidden"]


@dataclass
class OptimConfig:
    name: str = setting("adam", "the base optimiser: sgd (momentum) | adam", choices=OPTIMIZERS)
    mode: str = setting("normed", "a mode registered in optim/modes/ (MODES); built in: unnormed | normed (update "
                                  "of modular norm LR) | dualized (duality map) | manifold (weights on manifolds) | "
                                  "mup (μP: per-layer LRs and multipliers) | muon (Muon as practised: orthogonalised "
                                  "hidden matrices, the base optimiser elsewhere)")
    lr: Any = setting(None, "a number > 0; a list: one packed member per LR; null: the mode's default")
    beta1: float = setting(0.9, "momentum (SGD and Adam)", minimum=0, below=1)
    beta2: float = setting(0.99, "Adam's second-moment average", minimum=0, below=1)
    eps: float = setting(0.0, "Adam's ε (the paper's: none, NaN/inf entries set to 0)", minimum=0)
    wd: float = setting(0.0, "weight decay (× the step's LR), split over the network as a step is", minimum=0)
    decay_on: str = setting("all", "which weights weight decay shrinks: all | matrices (AdamW as nanoGPT uses it: "
                                   "weights of 2 or more dimensions, not gains or biases)", choices=DECAY_ON)
    schedule: str = setting("linear", "linear (decay to the floor, the paper's) | cosine | constant | wsd (warm-up, "
                                      "stable, then a cool-down over optim.decay_fraction)", choices=SCHEDULES)
    min_lr_ratio: float = setting(0.0, "the floor every schedule decays to, as a fraction of the LR", minimum=0,
                                  below=1)
    decay_fraction: float = setting(0.2, "wsd: the fraction of train.steps its cool-down takes",
                                    above=0, maximum=1)
    decay_shape: str = setting("1-sqrt", "wsd: the cool-down's shape: linear | cosine | 1-sqrt (Hägele et al. "
                                         "2024's best)", choices=tuple(DECAY_SHAPES))
    warmup_steps: int = setting(0, "linear warm-up steps", minimum=0)
    warmup_fraction: float | None = setting(None, "a fraction of train.steps instead (stretches with the run)",
                                            minimum=0, below=1)
    grad_clip: float | None = setting(None, "clip the raw gradient's global norm to this, before any mode's map, "
                                            "as torch.nn.utils.clip_grad_norm_ does (null: no clipping)", above=0)
    ortho: str = setting("polar_express", "dualized (and manifold's free layers): polar_express | muon | cubic "
                                          "| svd", choices=ORTHO_METHODS)
    ortho_steps: int | None = setting(None, "iterations of the polar factor; null: the method's default", minimum=1)
    ortho_dtype: str = setting("auto", "the iteration's dtype: auto (bfloat16 on CUDA, else float32) | float32 "
                                       "| bfloat16", choices=ORTHO_DTYPES)
    power_iterations: int = setting(2, "normed: warm-started power-iteration steps per update", minimum=1)
    manifold_iterations: int = setting(0, "manifold: most dual-ascent steps per update (0: the projected start; "
                                          "docs/manifold.md)", minimum=0)
    manifold_step: float = setting(1.0, "manifold: first multiplier step, decaying linearly to 0", above=0)
    manifold_tolerance: float = setting(1e-3, "manifold: a matrix stops once RMS(WᵀA + AᵀW) is below this",
                                        above=0)
    manifold_warm_start: bool = setting(True, "manifold: start from the previous step's multiplier")
    mup_base_width: int = setting(32, "mup: the width whose network μP trains exactly as unnormed (every multiplier "
                                      "1); each layer's LR, initial scale and readout multiplier scale from it "
                                      "(docs/mup.md)", minimum=1)
    mup_readout_zero: bool = setting(False, "mup: the readout starts at zero")
    mup_query_zero: bool = setting(False, "mup: the attention's query starts at zero")
    mup_depth: str = setting("none", "mup: the depth recipe: none (μP for width alone) | depth_mup (residual "
                                     "branches × (L/L₀)^-½, Tensor Programs VI) | completep (× (L/L₀)^-1, Dey et al. "
                                     "2025), each with its per-layer LR, ε and weight-decay corrections (docs/mup.md)",
                             choices=tuple(DEPTH_RECIPES))
    mup_base_depth: int = setting(1, "mup with mup_depth: the depth at which every depth multiplier is 1 (μP for "
                                     "width, with Adam's ε / m_w); set it to the depth you tune at", minimum=1)
    muon_scale: str = setting("original", "muon: each hidden matrix's factor: original √max(1, out/in) (Keller "
                                          "Jordan's) | match_rms_adamw 0.2·√max(out, in) (Moonshot's) | spectral "
                                          "√(out/in) (the modular norm's)", choices=MUON_SCALES)
    muon_momentum: float = setting(0.95, "muon: the hidden matrices' Nesterov momentum", minimum=0, below=1)
    muon_ns_steps: int = setting(5, "muon: Newton–Schulz steps (Keller Jordan's quintic)", minimum=1)
    muon_adam_ratio: float = setting(1.0, "muon: the base optimiser's LR (embeddings, readout, gains, biases) / the "
                                           "swept LR (1, chosen at width 64 from 2^-8 … 1: docs/own_model.md)", above=0)
    manifold_scaled: list[str] = setting(MANIFOLD_SCALED, "manifold: the roles whose radius is learned",
                                         items=ROLES)
    manifold_free: list[str] = setting(MANIFOLD_FREE, "manifold: the roles trained off the manifold (dualized)",
                                       items=ROLES)

    @classmethod
    def of(cls, node: Any) -> OptimConfig:
        """The settings of a composed ``optim`` config node (a key the schema lacks is a TypeError)."""
        return cls(**OmegaConf.to_container(node, resolve=True))
