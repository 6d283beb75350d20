"""Read what a cell directory holds, as plain data, tolerating missing or unreadable files.

This follows the documented layout (docs/ARCHITECTURE.md, "The cell directory" and "The result
bundle") directly, so report and diff work on any directory in that layout: a bundle's
`cells/<id>/`, a host's `runs/<run>/<id>/`, or one unpacked by hand. A missing file gives empty
data; an unreadable one is also noted in `problems`, so nothing is silently ignored.

The snapshot probe's output has no fixed schema here: accessors below look values up by
several plausible key spellings (see `find_value`) and return None when absent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analyze.metrics import REPEAT_KEY, finite_number, metric_names, values_of
from orchestrator.errors import BundleError

_NCCL_VERSION = re.compile(r"NCCL version ([0-9][^\s]*)")


def _read_json(path: Path, problems: list[str]) -> Any:
    """Parsed JSON of `path`, or None when missing; unreadable files are noted in `problems`."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(f"{path}: unreadable: {exc}")
        return None


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class CellEvidence:
    """Everything recorded about one cell, loaded from its directory."""

    path: Path
    id: str
    host: str | None
    axes: dict[str, Any]
    status: str | None
    reason: str | None
    failed_step: str | None
    cell: dict[str, Any]  # the Cell as recorded (secrets redacted)
    cell_json: dict[str, Any]  # the whole cell.json document
    repo: dict[str, Any]  # repo.json
    server: dict[str, Any]  # server.json
    env_check: dict[str, Any]  # env_check.json
    snapshot_pre: dict[str, Any]
    snapshot_post: dict[str, Any]
    metrics: dict[str, Any]  # metrics.json (bundle only)
    captures: dict[str, Any]  # "<name>.<moment>" -> parsed JSON
    run_id: str | None = None
    problems: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, cell_dir: Path, *, run_id: str | None = None) -> CellEvidence:
        """Load a cell directory; raises BundleError only when `cell_dir` is not a directory."""
        cell_dir = Path(cell_dir)
        if not cell_dir.is_dir():
            raise BundleError(f"{cell_dir}: not a cell directory")
        problems: list[str] = []
        cell_json = _as_dict(_read_json(cell_dir / "cell.json", problems))
        if not cell_json:
            problems.append(f"{cell_dir / 'cell.json'}: missing")
        cell = _as_dict(cell_json.get("cell"))
        captures: dict[str, Any] = {}
        captures_dir = cell_dir / "captures"
        if captures_dir.is_dir():
            for path in sorted(captures_dir.glob("*.json")):
                captures[path.stem] = _read_json(path, problems)
        if run_id is None:
            run_id = _guess_run_id(cell_dir)
        return cls(
            path=cell_dir,
            id=str(cell.get("id") or cell_dir.name),
            host=cell.get("host"),
            axes=_as_dict(cell.get("axes")),
            status=cell_json.get("status"),
            reason=cell_json.get("reason"),
            failed_step=cell_json.get("failed_step"),
            cell=cell,
            cell_json=cell_json,
            repo=_as_dict(_read_json(cell_dir / "repo.json", problems)),
            server=_as_dict(_read_json(cell_dir / "server.json", problems)),
            env_check=_as_dict(_read_json(cell_dir / "env_check.json", problems)),
            snapshot_pre=_as_dict(_read_json(cell_dir / "snapshot.pre.json", problems)),
            snapshot_post=_as_dict(_read_json(cell_dir / "snapshot.post.json", problems)),
            metrics=_as_dict(_read_json(cell_dir / "metrics.json", problems)),
            captures=captures,
            run_id=run_id,
            problems=problems,
        )

    @property
    def repeats(self) -> list[dict[str, Any]]:
        """The measured repeats from metrics.json: `[{"n": 1, metric: value, ...}, ...]`."""
        raw = self.metrics.get("repeats")
        if not isinstance(raw, list):
            return []
        return [r for r in raw if isinstance(r, dict)]

    @property
    def metric_names(self) -> list[str]:
        """Metric names in repeats, then any only in the summary, in first-seen order."""
        names = metric_names(self.repeats)
        names += [m for m in _as_dict(self.metrics.get("summary")) if m not in names]
        return names

    @property
    def expectations(self) -> list[dict[str, Any]]:
        """Checked expectations from metrics.json: `{"metric", "ok", "bound", "value"}`."""
        raw = self.metrics.get("expectations")
        return [e for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []

    def values(self, metric: str) -> list[float]:
        """Finite values of one metric across repeats, falling back to the summary median."""
        out = values_of(self.repeats, metric)
        if not out:
            summary = _as_dict(_as_dict(self.metrics.get("summary")).get(metric))
            median = finite_number(summary.get("median"))
            if median is not None:
                out.append(median)
        return out

    def repeat_rows(self) -> Iterator[tuple[Any, str, Any]]:
        """(repeat number, metric, value) for every metric of every repeat, in order."""
        for index, repeat in enumerate(self.repeats, start=1):
            number = repeat.get(REPEAT_KEY, index)
            for name, value in repeat.items():
                if name != REPEAT_KEY:
                    yield number, name, value

    def nccl_log_version(self) -> str | None:
        """The `NCCL version X` the server logged (the library really loaded), if any."""
        log = self.path / "server.log"
        if not log.is_file():
            return None
        try:
            with log.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:  # server logs can be large: stream, stop at the first hit
                    match = _NCCL_VERSION.search(line)
                    if match:
                        return match.group(1)
        except OSError as exc:
            self.problems.append(f"{log}: unreadable: {exc}")
        return None


def _guess_run_id(cell_dir: Path) -> str | None:
    """The run id when the cell sits in a bundle (`<run>/cells/<cell>`), else None."""
    parent = cell_dir.parent
    if parent.name == "cells":
        run_json = parent.parent / "run.json"
        data = _read_json(run_json, [])
        if isinstance(data, dict) and data.get("run_id"):
            return str(data["run_id"])
        return parent.parent.name
    return None


@dataclass
class RunEvidence:
    """A run directory: run.json plus its cells, in run.json's order when it lists them."""

    path: Path
    run: dict[str, Any]
    cells: list[CellEvidence]

    @property
    def run_id(self) -> str:
        """The run id from run.json, else the directory name."""
        return str(self.run.get("run_id") or self.path.name)


def load_run(run_dir: Path) -> RunEvidence:
    """Load every complete cell of a run directory (`cells/<id>/`; dot-named temps skipped)."""
    run_dir = Path(run_dir)
    cells_dir = run_dir / "cells"
    if not cells_dir.is_dir():
        raise BundleError(f"{run_dir}: not a run directory (no cells/)")
    run = _as_dict(_read_json(run_dir / "run.json", []))
    run_id = str(run.get("run_id") or run_dir.name)
    present = {p.name: p for p in cells_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
    listed = [c for c in _as_dict(run.get("cells")) if c in present]
    order = listed + sorted(n for n in present if n not in listed)
    cells = [CellEvidence.load(present[name], run_id=run_id) for name in order]
    return RunEvidence(path=run_dir, run=run, cells=cells)


def _in_progress(name: str) -> bool:
    """`.<id>.tmp` (a bundle's cell being installed) or `.<id>.partial` (a host's cell running)."""
    return name.startswith(".") and name.endswith((".tmp", ".partial"))


def load_cells(path: Path) -> list[CellEvidence]:
    """Cells of a run directory, or the one cell of a cell directory.

    A cell directory still being written (or left behind by an interrupted write) is refused:
    its files may be half there, so reading it would pass partial evidence off as complete.
    """
    path = Path(path)
    if _in_progress(path.resolve().name):
        raise BundleError(
            f"{path}: an incomplete cell (a write in progress or interrupted), not read",
            hint="pass a complete cell (cells/<id>/) or the run directory",
        )
    if (path / "cells").is_dir():
        return load_run(path).cells
    if (path / "cell.json").is_file():
        return [CellEvidence.load(path)]
    raise BundleError(
        f"{path}: neither a run directory (cells/) nor a cell directory (cell.json)",
        hint="pass results/<run-id> or results/<run-id>/cells/<cell-id>",
    )


# --- looking values up in snapshots whose exact key spelling is not fixed -------------------


def _norm(segment: str) -> str:
    return re.sub(r"[^a-z0-9]", "", segment.lower())


def flatten(data: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Scalar leaves of nested dicts keyed by normalized path segments (lists are left whole)."""
    out: dict[tuple[str, ...], Any] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            out.update(flatten(value, (*prefix, _norm(str(key)))))
    elif prefix:
        out[prefix] = data
    return out


def find_value(data: Any, candidates: list[str]) -> Any:
    """The first leaf whose normalized path ends with one of `candidates` (tried in order).

    A candidate is dotted (`torch.cuda`, `nvidia_smi.driver_version`); a leading `^` anchors it at
    the top level. Among several matches for one candidate the shortest path wins.
    """
    flat = flatten(data)
    for candidate in candidates:
        anchored = candidate.startswith("^")
        want = tuple(_norm(s) for s in candidate.lstrip("^").split("."))
        matches = [
            path
            for path in flat
            if (path == want if anchored else path[-len(want) :] == want)
            and not isinstance(flat[path], list | dict)
        ]
        if matches:
            return flat[min(matches, key=len)]
    return None


def find_key(data: Any, names: list[str], kind: type | tuple[type, ...] = object) -> Any:
    """The value of the shallowest key named one of `names` (normalized) that is a `kind`.

    Breadth first, so a top-level `env` wins over one nested deeper; None when nothing matches.
    """
    wanted = {_norm(n) for n in names}
    level: list[Any] = [data]
    while level:
        nested: list[Any] = []
        for node in level:
            if not isinstance(node, Mapping):
                continue
            for key, value in node.items():
                if _norm(str(key)) in wanted and isinstance(value, kind) and value is not None:
                    return value
                if isinstance(value, Mapping):
                    nested.append(value)
        level = nested
    return None
