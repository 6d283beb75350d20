"""Typed views of two documents of a cell: a snapshot (the probe's) and metrics.json.

A snapshot is looked up by the keys the probe declares (`orchestrator/runner/probe_shape.py`),
never by guessing spellings: the probe is ours. An item the probe could not collect reads as
absent (None or empty), with its reason from `absent()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runner import probe_shape as shape


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list_of_dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Snapshot:
    """One probe snapshot (`snapshot.pre.json`, `snapshot.post.json`, `hosts/<h>/facts.json`)."""

    data: Mapping[str, Any] = field(default_factory=dict)

    def absent(self, item: str) -> str | None:
        """Why the probe could not collect a top-level item, or None when it did."""
        value = self.data.get(item)
        if isinstance(value, dict) and shape.ABSENT in value:
            return str(value[shape.ABSENT])
        return None

    def item(self, item: str) -> Any:
        """A top-level item as collected; None when absent or not recorded."""
        return None if self.absent(item) is not None else self.data.get(item)

    def value(self, path: tuple[str, ...]) -> Any:
        """The scalar at `path` (e.g. `("driver", "version")`); None when any step is missing."""
        node: Any = self.data
        for key in path:
            if not isinstance(node, dict) or shape.ABSENT in node:
                return None
            node = node.get(key)
        return None if isinstance(node, dict | list) else node

    @property
    def gpus(self) -> list[dict[str, Any]]:
        """The GPU devices, keyed by the probe's field names (`shape.GPU_FIELDS`)."""
        return _list_of_dicts(_dict(self.item(shape.GPUS)).get(shape.GPU_DEVICES))

    @property
    def env(self) -> dict[str, Any]:
        """The serving-related environment the probe saw (secrets redacted)."""
        return _dict(self.item(shape.ENV))

    @property
    def topo(self) -> dict[str, Any]:
        """`nvidia-smi topo -m` parsed, when it was (it has `links`); else empty."""
        topo = _dict(self.item(shape.TOPO))
        return topo if isinstance(topo.get(shape.TOPO_LINKS), dict) else {}

    @property
    def git(self) -> dict[str, Any]:
        """The pinned repo's state (`head`, `describe`, `dirty`, ...)."""
        return _dict(self.item(shape.GIT))

    @property
    def python(self) -> dict[str, Any]:
        """The server's interpreter (`executable`, `version`, `requested`)."""
        return _dict(self.item(shape.PYTHON))


@dataclass(frozen=True)
class Metrics:
    """metrics.json: the controller's parse of a cell's repeats and its verdict's checks."""

    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def repeats(self) -> list[dict[str, Any]]:
        """Measured repeats: `[{"n": 1, metric: value, ...}, ...]`."""
        return _list_of_dicts(self.data.get("repeats"))

    @property
    def summary(self) -> dict[str, dict[str, Any]]:
        """{metric: {median, min, max, n, ...}}."""
        return {k: v for k, v in _dict(self.data.get("summary")).items() if isinstance(v, dict)}

    @property
    def expectations(self) -> list[dict[str, Any]]:
        """Checked expectations: `{"metric", "ok", "bound", "value", "detail"}`."""
        return _list_of_dicts(self.data.get("expectations"))

    @property
    def checks(self) -> list[dict[str, Any]]:
        """Adapter checks: `{"name", "ok", "detail"}`."""
        return _list_of_dicts(self.data.get("checks"))
