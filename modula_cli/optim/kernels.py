"""What one optimiser update launches: its operators counted with ``torch.profiler`` on any device, and the
host syncs among them (docs/performance.md, "The step's operations"). A CPU run counts what a GPU would launch:
the same operators reach the dispatcher, so the count needs no GPU.

Counted as one launch each: an operator that reaches no other (a leaf of the profile), and a ``_foreach_`` operator
(on a GPU one multi-tensor kernel; on a CPU it loops over its tensors itself). Not counted: views and metadata,
which move no data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

# operators that only make views or read metadata: no kernel on any device
NO_KERNEL = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided",
    "aten::expand", "aten::expand_as", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::narrow", "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::chunk", "aten::t",
    "aten::transpose", "aten::permute", "aten::numpy_T", "aten::mT", "aten::movedim", "aten::alias",
    "aten::detach", "aten::detach_", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg",
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::result_type", "aten::to",
    "aten::flatten", "aten::unflatten", "aten::view_as", "aten::contiguous", "aten::size", "aten::stride",
    "aten::is_same_size", "aten::diagonal",
})
# operators that wait for the device: a scalar read back to Python (``item``, ``bool(t)``, ``float(t)`` all end in
# ``_local_scalar_dense``, counted once), or an output whose size depends on the values
HOST_SYNCS = frozenset({
    "aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2",
    "aten::unique_consecutive", "aten::equal",
})


@dataclass(frozen=True)
class Launches:
    """The kernels a function launched, by operator, and the host syncs it made."""

    kernels: Counter
    host_syncs: Counter

    @property
    def total(self) -> int:
        return sum(self.kernels.values())


def count_launches(fn: Callable[[], object]) -> Launches:
    """Run ``fn`` once under the profiler and count what it launched."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    kernels: Counter = Counter()
    syncs: Counter = Counter()
    events = [event for event in profile.events() if event.name.startswith("aten::")]
    for event in events:
        if event.name in HOST_SYNCS:
            syncs[event.name] += 1
    for event in events:
        if event.cpu_parent is None or not _inside_aten(event):
            _count(event, kernels)
    return Launches(kernels, syncs)


def _inside_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def _count(event, kernels: Counter) -> None:
    if event.name.startswith("aten::_foreach_"):
        kernels[event.name] += 1
        return
    children = [child for child in event.cpu_children if child.name.startswith("aten::")]
    if children:
        for child in children:
            _count(child, kernels)
    elif event.name not in NO_KERNEL:
        kernels[event.name] += 1
