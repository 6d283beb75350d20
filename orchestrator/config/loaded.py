"""A playbook after loading: merged plain data plus where every key came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.keypath import KeyPath
from orchestrator.config.model import PlaybookModel
from orchestrator.errors import SourceLocation


@dataclass(frozen=True)
class LoadedPlaybook:
    """The merged playbook (extends, vars_files and -e applied): its data and its model.

    `data` holds only what users wrote (no defaults filled in), so rendering touches exactly their
    strings; `model` is the `PlaybookModel` that validated it (templates still in place), whose
    section models the planner validates each rendered section with. `positions` maps key paths
    to the file, line and column they came from, across every file of an `extends` chain.
    """

    path: Path
    data: dict[str, Any]
    model: PlaybookModel
    files: tuple[Path, ...]  # every file it was built from: the playbook, its bases, vars files
    positions: Mapping[KeyPath, SourceLocation] = field(default_factory=dict)
    extra_vars: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The playbook's declared name."""
        return str(self.data.get("name", self.path.stem))

    def locate(self, path: KeyPath) -> SourceLocation:
        """The location of `path`, or of its nearest ancestor we know, or of the file."""
        p = tuple(path)
        while p:
            loc = self.positions.get(p)
            if loc is not None:
                return loc
            p = p[:-1]
        return self.positions.get((), SourceLocation(str(self.path)))
