"""Typed settings: a dataclass field with a one-line doc (and a number's range, a text's choices, a list's
items), the check of a config node's values against such a dataclass, and the dataclass of a checked node."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


def setting(default: Any, doc: str, *, minimum: float | None = None, above: float | None = None,
            below: float | None = None, maximum: float | None = None, finite: bool = True,
            choices: tuple | None = None, items: str | None = None) -> Any:
    """A schema field: its default, a one-line doc, and for a number its range (``minimum`` and ``maximum``
    included, ``above`` and ``below`` excluded; a float with a range must be finite unless ``finite=False``), for
    text its choices, for a list what its items are (said when it is not such a list)."""
    metadata = {"doc": doc, "minimum": minimum, "above": above, "below": below, "maximum": maximum,
                "finite": finite, "choices": choices, "items": items}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def listed(value: Any) -> bool:
    """A list from YAML, the command line or Python; anything else is one value."""
    return isinstance(value, (list, tuple, ListConfig))


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
_ITEM_WORDS = {bool: "true / false values", int: "integers", float: "numbers", str: "names"}


def _instance(value: Any, kind: Any) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _value_problem(key: str, value: Any, hint: Any, metadata: typing.Mapping[str, Any]) -> str | None:
    """The one-line problem of one setting's value against its schema type, or None."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kinds = [kind for kind in options if kind is not type(None)]
    nullable = len(kinds) < len(options)
    if value is None:
        return None if nullable or Any in kinds else f"{key}=null; must be set"
    null = " or null" if nullable else ""
    kind = kinds[0]
    if kind is Any:
        return None
    if (choices := metadata.get("choices")) is not None and value not in choices:
        return f"{key}={value!r}; allowed: {', '.join(map(str, choices))}"
    if typing.get_origin(kind) is list:
        item = typing.get_args(kind)[0]
        if not listed(value) or not all(_instance(v, item) for v in value):
            return f"{key}={value}; must be a list of {metadata.get('items') or _ITEM_WORDS[item]}"
        return None
    if kind is int and (minimum := metadata.get("minimum")) is not None:
        if not _instance(value, int) or value < minimum:
            return f"{key}={value!r}; must be an integer >= {minimum}{null}{_as_integer(key, value)}"
        return None
    if kind is float and (bounds := _range_words(metadata)) is not None:
        return None if _in_range(value, metadata) else f"{key}={value!r}; must be {bounds}{null}"
    return None if _instance(value, kind) else f"{key}={value!r}; must be {_TYPE_WORDS[kind]}{_as_integer(key, value)}"


def _range_words(metadata: typing.Mapping[str, Any]) -> str | None:
    """``a number in [0, 1)``, ``a finite number > 0``, ``a number >= 0``; None for a number without a range."""
    low, above, below = metadata.get("minimum"), metadata.get("above"), metadata.get("below")
    high = metadata.get("maximum")
    if below is not None or high is not None:
        left = f"[{low:g}" if low is not None else f"({above:g}" if above is not None else "(-inf"
        return f"a number in {left}, {below:g})" if below is not None else f"a number in {left}, {high:g}]"
    number = "a finite number" if metadata.get("finite", True) else "a number"
    if low is not None:
        return f"{number} >= {low:g}"
    return f"{number} > {above:g}" if above is not None else None


def _in_range(value: Any, metadata: typing.Mapping[str, Any]) -> bool:
    if not _instance(value, float) or math.isnan(value) or (metadata.get("finite", True) and math.isinf(value)):
        return False
    low, above, below = metadata.get("minimum"), metadata.get("above"), metadata.get("below")
    high = metadata.get("maximum")
    return (low is None or value >= low) and (above is None or value > above) and \
        (below is None or value < below) and (high is None or value <= high)


def _as_integer(key: str, value: Any) -> str:
    """How to write a whole number the command line read as a float (``train.steps=1e3`` is 1000.0)."""
    whole = isinstance(value, float) and value.is_integer() and abs(value) < 2**53
    return f" (write {key}={int(value)})" if whole else ""


def checked(group: str, node: Any, schema: type) -> tuple[list[str], dict[str, Any]]:
    """One line per setting of ``node`` (the ``group`` config) whose value does not fit ``schema``, and the
    node's values with each such setting at its default, so that the group's own rules can run on the rest
    without tripping over a value of the wrong type (reported once, here). Settings the node lacks (an open
    group's) are left out; keys the schema does not name are kept. A block of settings (a field whose type is a
    dataclass) is checked setting by setting, named ``group.block.setting``."""
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    hints = typing.get_type_hints(schema)
    problems = []
    for f in dataclasses.fields(schema):
        if f.name not in values:
            continue
        if dataclasses.is_dataclass(hints[f.name]) and isinstance(values[f.name], dict):  # a block: its settings
            found, values[f.name] = checked(f"{group}.{f.name}", values[f.name], hints[f.name])
            problems += found
        elif problem := _value_problem(f"{group}.{f.name}", values[f.name], hints[f.name], f.metadata):
            problems.append(problem)
            values[f.name] = getattr(schema(), f.name)
    return problems, values



def typed(schema: type, node: Any) -> Any:
    """The ``schema`` dataclass of a checked config node: its values, the schema's defaults for keys an open
    group's node lacks, and no keys the schema does not name (a builder's own options stay in the node)."""
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    hints = typing.get_type_hints(schema)
    names = {f.name for f in dataclasses.fields(schema)}
    return schema(**{k: typed(hints[k], v) if dataclasses.is_dataclass(hints[k]) and isinstance(v, dict) else v
                     for k, v in values.items() if k in names})
