"""Per-layer geometry during ordinary training (``train.layer_stats_every=N``): every N steps, each
member's atoms measured as the coordinate check measures them (``geometry.py``), on a small fixed probe
(the first evaluation batch's first ``PROBE_SAMPLES``), into ``layer_stats.jsonl`` and W&B.

Changes are measured from the run's initial weights and their outputs on the probe, which the seeds
regenerate, so a resumed run measures from the same start. Cost: the initial weights are kept (one more
copy of the model) and each measurement runs a probe forward pass and two SVDs per matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..nn import Module, layer_names, layer_roles
from .geometry import Captured, captured, layer_geometry

PROBE_SAMPLES = 4


class LayerStats:
    """Measures every ``every`` steps; the loop calls ``due`` before its update and ``measure`` after it."""

    def __init__(self, net: Module, losses: Callable[..., Any], batch: tuple[torch.Tensor, torch.Tensor],
                 initial_weights: list[torch.Tensor], packed: bool, every: int):
        """``losses(weights, x, y)``: the run's forward pass (its autocast included); ``batch``: the first
        evaluation batch, whose first samples are the probe; ``packed``: weights and batch carry a member axis."""
        self.net, self.losses, self.every, self.packed = net, losses, every, packed
        x, y = batch
        self.probe = (x[:, :PROBE_SAMPLES], y[:, :PROBE_SAMPLES]) if packed else (x[:PROBE_SAMPLES], y[:PROBE_SAMPLES])
        self.names, self.roles = layer_names(net), layer_roles(net)
        self.initial_weights = initial_weights
        self.initial = self._capture(initial_weights)

    def due(self, t: int) -> bool:
        """Whether step t's update is measured (after it: the record's step is t + 1, as for evaluations)."""
        return (t + 1) % self.every == 0

    @torch.no_grad()
    def _capture(self, weights: list[torch.Tensor]) -> Captured:
        with captured(self.net) as now:
            self.losses(weights, *self.probe)
        return now

    def _member(self, values: dict[int, torch.Tensor] | list[torch.Tensor], k: int):
        if not self.packed:
            return values
        # A leading axis of 1 broadcasts over the members (the positions an Enumerate bond feeds an Embed).
        pick = lambda v: v[k if v.shape[0] > 1 else 0]  # noqa: E731
        if isinstance(values, dict):
            return {i: pick(v) for i, v in values.items()}
        return [pick(v) for v in values]

    def measure(self, weights: list[torch.Tensor], before: list[torch.Tensor], lr: torch.Tensor,
                running: list[bool]) -> list[list[dict[str, Any]] | None]:
        """Per member: one record per atom (None for a member that no longer trains)."""
        now = self._capture(weights)
        updates = [b - w.detach() for b, w in zip(before, weights)]
        lrs = lr.reshape(-1).tolist()
        result: list[list[dict[str, Any]] | None] = []
        for k, alive in enumerate(running):
            if not alive:
                result.append(None)
                continue
            pick = lambda c: Captured(self._member(c.inputs, k), self._member(c.outputs, k))  # noqa: E731
            records = layer_geometry(self.net, self._member([w.detach() for w in weights], k), pick(now),
                                     pick(self.initial), self._member(self.initial_weights, k),
                                     self._member(updates, k), lrs[k % len(lrs)])
            result.append([{"layer": name, "role": role, **record}
                           for name, role, record in zip(self.names, self.roles, records)])
        return result
