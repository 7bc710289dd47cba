"""The ``arch`` config group's schema. It is an open group: each builder takes the keys its YAML gives (a user's
own network may add its own), so this types and documents the keys the built-in architectures share and gives
the defaults of those a YAML may leave out."""

from __future__ import annotations

from dataclasses import dataclass

from ..plumbing.settings import setting


@dataclass
class ArchConfig:
    """The keys the built-in architectures share; a builder ignores those it does not take."""
    name: str = setting("gpt", "gpt | resmlp | resnet | standard_gpt | package.module:function (your own)")
    width: int | None = setting(None, "hidden width", minimum=1)
    depth: int | None = setting(None, "residual blocks", minimum=1)
    heads: int | None = setting(None, "attention heads (GPT)", minimum=1)
    block_depth: int | None = setting(None, "layers per residual block (ResMLP, ResNet)", minimum=1)
    blocks_mass: float | None = setting(None, "the residual blocks' total mass", above=0)
    loss_window: int = setting(1, "a run's final train loss: the mean of the last N steps' losses", minimum=1)
    data_kind: str | None = setting(None, "your own network: language | image (leave out: both)")
    kernel_size: int | None = setting(None, "convolution kernel size (ResNet)", minimum=1)
    residual_scale: float | None = setting(None, "the multiplier s on every residual branch, x + s·f(x) (standard_gpt; "
                                                 "your own model reads it from its YAML); μP's depth recipes scale it "
                                                 "(optim.mup.depth, docs/mup.md)", above=0)
    readout: str | None = setting(None, "your torch model: the module path of its readout (e.g. lm_head), for μP and "
                                        "Muon; leave out: found from the shapes")
    targets_keyword: str | None = setting("auto", "your torch model: the parameter of its forward that takes the "
                                                  "targets (nanoGPT's forward(idx, targets) returns every position's "
                                                  "logits only when given them); auto: targets, if its forward has "
                                                  "one; null: never given")
