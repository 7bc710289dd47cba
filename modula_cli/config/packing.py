"""Packing a sweep: with ``sweep.pack=true`` the swept LRs and seeds of each grid point train as one
packed run (``optim.lr=[…] train.seed=[…]``) instead of one job each. Every other axis stays a job axis,
so a width × LR × seed grid becomes one job per width, whatever the launcher."""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser

from .identity import PACKABLE


def pack_arguments(arguments: list[str]) -> list[str]:
    """``optim.lr=0.25,0.5`` → ``optim.lr=[0.25,0.5]`` (and the same for ``train.seed``, ``range(…)``
    included); every other override is left as it is."""
    parser = OverridesParser.create()
    packed = []
    for argument in arguments:
        override = parser.parse_override(argument)
        if override.key_or_group in PACKABLE and override.is_discrete_sweep():
            values = ",".join(override.sweep_string_iterator())
            packed.append(f"{override.get_key_element()}=[{values}]")
        else:
            packed.append(argument)
    return packed
