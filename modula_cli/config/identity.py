"""What identifies a run, worked out here alone: which settings change its numbers (its fingerprint), what
its tables index it by (its series and knobs, ``RunIdentity``) and its folder name.

One list of the settings that never change a run's numbers serves all three, so a folder name, a fingerprint
and a table row always agree on what makes two runs different.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..plumbing.user_code import source_digest
from ..data import data_identity
from ..models.variant import differences, name_of, variant_of
from ..optim import MODES
from ..optim.mode_settings import FLAT_NAMES, flat_settings

# Settings that change how a run is watched, stored or placed, not its numbers.
NOT_NUMERIC = frozenset({
    "train.progress", "train.rerun", "train.checkpoint_every", "train.log_every", "train.keep_checkpoint",
    "train.device", "train.threads", "train.compile", "train.layer_stats_every", "train.branch", "data.root",
    "data.num_proc",
    "arch.data_kind",
    # one batch's step in micro-batches: the same numbers up to float error (as train.compile's)
    "train.grad_accum",
})
# Each registry below names the optim settings as runs were first fingerprinted (``optim.mup_base_width``, not the
# block spelling ``optim.mup.base_width``: ``mode_settings.FLAT_NAMES``), so that no finished run changes identity.
# Settings added after runs were first fingerprinted: at these values they are left out, so a run finished by
# an earlier version keeps its fingerprint (and is not trained again).
LATER_DEFAULTS = {"optim.warmup_fraction": None, "optim.ortho_dtype": "auto",
                  # empty: every layer at a fixed radius, manifold mode before its learned radii
                  "optim.manifold_scaled": [], "optim.manifold_free": [],
                  # μP for width alone; standard_gpt's plain residual branches
                  "optim.mup_depth": "none", "optim.mup_base_depth": 1, "arch.residual_scale": 1.0,
                  # the recipe's settings: no floor, no clipping, weight decay on every weight
                  "optim.min_lr_ratio": 0.0, "optim.grad_clip": None, "optim.decay_on": "all"}
# Settings that change the numbers only when the rest of a run's settings say so: dropped otherwise.
ONLY_WHEN = {
    "optim.mup_base_depth": lambda optim: optim.get("mup_depth", "none") != "none",  # no depth recipe, no base
    "optim.decay_fraction": lambda optim: optim.get("schedule") == "wsd",
    "optim.decay_shape": lambda optim: optim.get("schedule") == "wsd",
    "optim.decay_on": lambda optim: bool(optim.get("wd")),  # no weight decay: nothing to choose weights for
}
# A mode's block of settings (optim.<block>.*, ``mode_settings.settings_block``) is in the fingerprints of its own
# mode's runs from that mode's first run (and in no other mode's: ``Mode.own_block``), so a new mode's block needs
# no entry here. A setting added later to a block whose mode has finished runs needs its LATER_DEFAULTS entry like
# any other (tests/test_identity.py's pinned fingerprints fail without one).
BLOCK_SETTINGS = frozenset(f"optim.{flat}" for flat in FLAT_NAMES.values())
# Settings in every fingerprint from the first run that had them, so no default stands for older runs. With
# NOT_NUMERIC, LATER_DEFAULTS and ONLY_WHEN this decides every setting of the train, optim, arch and data schemas: a
# new one must be added to one of them (tests/test_identity.py checks).
FINGERPRINTED = BLOCK_SETTINGS - set(LATER_DEFAULTS) - set(ONLY_WHEN) | frozenset({
    "arch.name", "arch.width", "arch.depth", "arch.heads", "arch.block_depth", "arch.blocks_mass", "arch.loss_window",
    "arch.kernel_size", "arch.readout", "arch.targets_keyword",
    "data.name", "data.context", "data.max_context",
    "train.steps", "train.batch_size", "train.eval_every", "train.eval_batches", "train.seed", "train.dtype",
    "train.diverge_factor",
    "optim.name", "optim.mode", "optim.lr", "optim.beta1", "optim.beta2", "optim.eps", "optim.wd",
    "optim.schedule", "optim.warmup_steps",
})
RUN_GROUPS = ("arch", "data", "optim", "train")
# The config groups whose choice on the command line names a run folder, and every group whose settings change
# the numbers (the variant's only where they differ from the modular variant, so a run finished before variants
# existed keeps its fingerprint; its sweep folder, not its run folder, names it).
CHOICE_GROUPS = ("arch", "data", "optim")
NUMERIC_GROUPS = (*RUN_GROUPS, "variant")
# What a table row is indexed by: the series (one line of a transfer plot per series and experiment) and each
# knob a sweep may scale, with where a run's config holds it.
SERIES = ("arch", "data", "optimizer", "mode", "variant")
KNOB_KEYS = {"width": "arch.width", "depth": "arch.depth", "block_depth": "arch.block_depth",
             "blocks_mass": "arch.blocks_mass", "heads": "arch.heads", "context": "data.context",
             "batch_size": "train.batch_size", "steps": "train.steps", "wd": "optim.wd"}
KNOBS = tuple(KNOB_KEYS)
MAX_NAME_BYTES = 120  # well inside the 255-byte limit of one path component
# Kept readable when a name must be shortened; everything else is folded into the hash.
NAME_PRIORITY = ("arch", "data", "optim", "mode", "width", "depth", "block_depth", "blocks_mass", "heads",
                 "context", "lr", "seed")


def changes_numbers(key: str) -> bool:
    return key.split(".")[0] in NUMERIC_GROUPS and key not in NOT_NUMERIC


def numeric_settings(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """Every setting that changes the numbers, by group (what a fingerprint hashes)."""
    relevant = {}
    for group in RUN_GROUPS:
        values = OmegaConf.to_container(cfg[group], resolve=True)
        if group == "optim":  # each block's settings by the flat name runs were first fingerprinted by
            values = flat_settings(values)
        relevant[group] = {k: v for k, v in values.items() if f"{group}.{k}" not in NOT_NUMERIC
                           and not (f"{group}.{k}" in LATER_DEFAULTS and v == LATER_DEFAULTS[f"{group}.{k}"])}
    # a mode's own block (optim.manifold.*) changes no other mode's numbers
    others = {mode.own_block for name, mode in MODES.items() if name != relevant["optim"].get("mode")}
    theirs = {flat for dotted, flat in FLAT_NAMES.items() if dotted.partition(".")[0] in others}
    relevant["optim"] = {k: v for k, v in relevant["optim"].items() if k not in theirs}
    for key, applies in ONLY_WHEN.items():
        if not applies(relevant["optim"]):
            relevant["optim"].pop(key.partition(".")[2], None)
    lr = relevant["optim"].get("lr")
    if isinstance(lr, int) and not isinstance(lr, bool):  # optim.lr=1 and a packed member's 1.0 are one run
        relevant["optim"]["lr"] = float(lr)
    if variant := differences(variant_of(cfg)):
        relevant["variant"] = variant
    if (data := data_identity(str(cfg.data.name), **relevant["data"])) is not None:  # a user's files: their hash
        relevant["data"]["identity"] = data
    if ":" in str(relevant["arch"].get("name", "")):  # a user's builder: an edited file is another network
        if (digest := source_digest(relevant["arch"]["name"])) is not None:
            relevant["arch"]["source"] = digest
    return relevant


def fingerprint(cfg: DictConfig) -> str:
    """Hash of every setting that changes the numbers."""
    return _digest(numeric_settings(cfg), 16)


def trunk_fingerprint(cfgs: list[DictConfig], warmup_steps: int) -> str:
    """What a WSD run's stable phase depends on: every number-changing setting of each member except the horizon
    (``train.steps``, and what it sets: a warm-up given as a fraction, the cool-down's length) and the cool-down's
    shape and floor, with the warm-up's length in steps (``run/branches.py``)."""
    shared = []
    for cfg in cfgs:
        settings = numeric_settings(cfg)
        settings["train"].pop("steps", None)
        for key in ("warmup_fraction", "warmup_steps", "decay_fraction", "decay_shape", "min_lr_ratio"):
            settings["optim"].pop(key, None)
        shared.append(settings)
    return _digest({"members": shared, "warmup": warmup_steps}, 16)


PER_RUN = ("optim.lr", "train.seed")  # what varies within one experiment's curves, besides its scale


def experiment_settings(cfg: DictConfig) -> dict[str, Any]:
    """The settings that make a run part of one experiment, flat (``{"train.steps": 400, …}``): every
    number-changing setting except the LR and the seed. Two runs belong to one transfer curve only when
    these agree on everything but the scale knob."""
    return {f"{group}.{key}": value for group, values in numeric_settings(cfg).items()
            for key, value in values.items() if f"{group}.{key}" not in PER_RUN}


@dataclass(frozen=True)
class RunIdentity:
    """Who one run is, worked out once from its composed config (``of``): the values its tables index it by
    (series, knobs, LR, seed, and ``settings``: what tells its experiment apart) and its fingerprint. Planned
    runs, summaries and the report all read these; none works them out again."""
    knobs: dict[str, Any]
    fingerprint: str

    @classmethod
    def of(cls, cfg: DictConfig, lr: float, seed: int) -> RunIdentity:
        knobs: dict[str, Any] = {"arch": cfg.arch.name, "data": cfg.data.name, "optimizer": cfg.optim.name,
                                 "mode": cfg.optim.mode, "variant": name_of(cfg)}
        for knob, key in KNOB_KEYS.items():
            value = OmegaConf.select(cfg, key)
            if value is not None:
                knobs[knob] = value
        return cls({**knobs, "lr": float(lr), "seed": int(seed), "settings": experiment_settings(cfg)},
                   fingerprint(cfg))

    def planned(self) -> dict[str, Any]:
        """As ``sweep.json`` records a planned run: its knobs and fingerprint."""
        return {**self.knobs, "fingerprint": self.fingerprint}


def _digest(value: Any, length: int) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]


def job_label(task_overrides: list[str]) -> str:
    """What a progress line names a job by: its run folder's name (``lr=0.25,width=64``); for a packed job, what its
    runs share and the span of each packed list (``width=128: lr 0.0156…4 (9), seed 0…2 (3)``): a folder name past
    ``MAX_NAME_BYTES`` is cut and hashed, a log line need not be."""
    packed = {}
    for override in task_overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if value.startswith("[") and value.endswith("]"):
            packed[key] = [v.strip() for v in value[1:-1].split(",") if v.strip()]
    if not packed:
        return run_name(task_overrides)
    rest = [o for o in task_overrides if o.lstrip("+~").partition("=")[0] not in packed]
    shared = run_name(rest) if rest else ""
    short = short_keys(sorted(packed))
    spans = []
    for key in sorted(packed, key=lambda k: short[k]):
        values = packed[key]
        try:
            numbers = sorted(float(v) for v in values)
            ends = [f"{n:.3g}" for n in (numbers[0], numbers[-1])]
        except ValueError:
            ends = [values[0], values[-1]]
        span = ends[0] if len(values) == 1 else f"{ends[0]}…{ends[1]}"
        spans.append(f"{short[key]} {span} ({len(values)})")
    return f"{shared + ': ' if shared and shared != 'default' else ''}{', '.join(spans)}"


def short_keys(keys: list[str]) -> dict[str, str]:
    """``arch.width`` → ``width``, ``optim.lr`` → ``lr``; a last part two keys share keeps the full key."""
    last = [k.split(".")[-1] for k in keys]
    return {k: (short if last.count(short) == 1 else k) for k, short in zip(keys, last)}


def _value_text(key: str, value: str) -> str:
    if value.startswith("[") and value.endswith("]"):  # a packed list: its values, or its range when long
        items = [_value_text(key, v.strip()) for v in value[1:-1].split(",") if v.strip()]
        if len(items) <= 3:
            return "+".join(items)
        ends = [_short_number(v) for v in (items[0], items[-1])]
        return f"{ends[0]}..{ends[1]}x{len(items)}-{_digest(items, 3)}"  # the hash: lists with the same ends
    if key == "optim.lr":
        try:
            return repr(float(value))  # 1e-3 and 0.001 are one run
        except ValueError:
            pass
    return value.replace("/", "_")


def _short_number(value: str) -> str:
    try:
        return f"{float(value):.3g}"
    except ValueError:
        return value


def flat_key(key: str) -> str:
    """``optim.muon.adam_ratio`` → ``optim.muon_adam_ratio``: a block setting by the flat name the registries
    above and the run folders of runs finished before the blocks use (``mode_settings.FLAT_NAMES``)."""
    group, _, rest = key.partition(".")
    return f"optim.{FLAT_NAMES[rest]}" if group == "optim" and rest in FLAT_NAMES else key


def run_name(task_overrides: list[str]) -> str:
    """The folder of one grid point: its number-changing overrides, short (``lr=0.25,width=64``).

    The same point always gets the same name, whatever the order of the overrides. A name past
    ``MAX_NAME_BYTES`` keeps the main knobs readable and folds the rest into a hash; the full overrides
    live in the run's config.yaml and summary.json."""
    items: dict[str, str] = {}
    for override in task_overrides:
        key, _, value = override.lstrip("+~").partition("=")
        key = flat_key(key)  # a block's spelling names the folder its flat one named: finished runs are found
        if key.partition(".")[0] == "variant":
            continue  # the sweep folder names the variant (…_paper): typing the default changes no run folder

        if key in CHOICE_GROUPS or changes_numbers(key):
            items[key] = _value_text(key, value)
    short = short_keys(sorted(items))
    parts = sorted((short[k], v) for k, v in items.items())
    name = ",".join(f"{k}={v}" for k, v in parts) or "default"
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    kept = ",".join(f"{k}={v[:24]}" for k, v in parts if k in NAME_PRIORITY)
    return f"{kept[:MAX_NAME_BYTES - 12]},h={_digest(parts, 8)}".lstrip(",")
