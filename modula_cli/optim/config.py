"""The ``optim`` config group's schema: configs/optim/*.yaml choose the base optimiser and set what differs."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from ..plumbing.settings import setting
from .mode_settings import BLOCK_DOCS, BLOCKS, FLAT_NAMES, move_old_spellings
from .schedule import DECAY_SHAPES, SCHEDULES


OPTIMIZERS = ("sgd", "adam")  # each with its direction in directions.py (DIRECTIONS)
DECAY_ON = ("all", "matrices")  # optim.decay_on: which weights weight decay shrinks


@dataclass
class SharedOptimSettings:
    """The settings every mode reads; ``OptimConfig`` adds each mode's block (``mode_settings.BLOCKS``)."""

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

    @classmethod
    def of(cls, node: Any) -> OptimConfig:
        """The settings of a composed ``optim`` config node, or of its values (a key the schema lacks is a
        TypeError)."""
        values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else copy.deepcopy(dict(node))
        move_old_spellings(values)  # a config that skipped the check's reading (the check says each one)
        blocks = {name: schema(**(values.pop(name, None) or {})) for name, schema in BLOCKS.items()}
        return cls(**values, **blocks)


# The whole optim schema: the shared settings and one field per block (optim.mup.*), at the block's defaults, made
# from the registry so that a new mode's block (``mode_settings.settings_block``) needs no edit here. A block or a
# block setting's flat name (a fingerprint's key) that is a shared setting's name would mix the two.
if clash := sorted({f.name for f in dataclasses.fields(SharedOptimSettings)} & {*BLOCKS, *FLAT_NAMES.values()}):
    raise TypeError(f"settings blocks of optim name shared settings: {clash}")
OptimConfig = dataclasses.make_dataclass(
    "OptimConfig", [(name, schema, dataclasses.field(default_factory=schema, metadata={"doc": BLOCK_DOCS[name]}))
                    for name, schema in BLOCKS.items()],
    bases=(SharedOptimSettings,), namespace={"__module__": __name__})
