"""Merging playbook layers (bases, vars files, -e) while keeping where every key came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.keypath import KeyPath
from orchestrator.errors import SourceLocation

# --------------------------------------------------------------------------------------------
# Merging with positions


@dataclass
class Layer:
    """Plain data with the key and value positions of everything in it."""

    data: Any
    positions: dict[KeyPath, SourceLocation] = field(default_factory=dict)
    value_positions: dict[KeyPath, SourceLocation] = field(default_factory=dict)


def copy_positions(src: Layer, value: Any, path: KeyPath, out: Layer) -> None:
    if path in src.positions:
        out.positions[path] = src.positions[path]
    if path in src.value_positions:
        out.value_positions[path] = src.value_positions[path]
    if isinstance(value, dict):
        for k, v in value.items():
            copy_positions(src, v, (*path, k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            copy_positions(src, v, (*path, i), out)


def _merge_values(
    base: Any, over: Any, path: KeyPath, bsrc: Layer, osrc: Layer, out: Layer, levels: int
) -> Any:
    """`over` wins; mappings merge key by key `levels` deep (-1: all the way), lists replace."""
    if levels == 0 or not (isinstance(base, dict) and isinstance(over, dict)):
        copy_positions(osrc, over, path, out)
        return over
    for src in (bsrc, osrc):  # the winning file's position for the mapping itself
        if path in src.positions:
            out.positions[path] = src.positions[path]
        if path in src.value_positions:
            out.value_positions[path] = src.value_positions[path]
    merged: dict[Any, Any] = {}
    for k, v in base.items():
        if k not in over:
            merged[k] = v
            copy_positions(bsrc, v, (*path, k), out)
    for k, v in over.items():
        if k in base:
            merged[k] = _merge_values(base[k], v, (*path, k), bsrc, osrc, out, levels - 1)
        else:
            merged[k] = v
            copy_positions(osrc, v, (*path, k), out)
    # Keep the base's key order (matrix axes order matters), new keys after.
    return {k: merged[k] for k in [*base, *(k for k in over if k not in base)]}


def merge_layers(base: Layer, over: Layer, levels: int = -1) -> Layer:
    out = Layer(None)
    out.data = _merge_values(base.data, over.data, (), base, over, out, levels)
    if () in base.positions:
        out.positions[()] = base.positions[()]
    return out


def reroot(src: Layer, prefix: KeyPath) -> Layer:
    """The same data placed under `prefix` (positions shifted accordingly)."""
    data: Any = src.data
    for part in reversed(prefix):
        data = {part: data}
    return Layer(
        data,
        {(*prefix, *k): v for k, v in src.positions.items() if k},
        {(*prefix, *k): v for k, v in src.value_positions.items() if k},
    )
