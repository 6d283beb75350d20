"""Typed records of a bundle's cell: the cell folder, its repeats, a snapshot, its metrics.

Files of a cell are read on first use; names come from `results/layout.py`. A snapshot is
looked up by the keys the probe declares (`orchestrator/runner/probe/shape.py`), never by
guessing spellings: the probe is ours. An item the probe could not collect reads as
absent (None or empty), with its reason from `absent()`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from orchestrator.errors import BundleError
from orchestrator.results import layout
from orchestrator.results.documents import (
    DAMAGED,
    cell_json_problem,
    check_schema,
    read_json,
    read_json_noting,
)
from orchestrator.results.layout import CELL_JSON
from orchestrator.runner.probe import shape


class RunSource(Protocol):
    """What a cell needs of the run it was read from (results/read.py's RunBundle)."""

    @property
    def source(self) -> Path: ...


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


@dataclass(frozen=True)
class NodeRecord:
    """Another node of a multi-node cell, as `nodes.json` says: what it did and its folder."""

    host: str  # the inventory host (on Slurm: the node's name, `via` the login host)
    rank: int  # 1..: the head (rank 0) is the cell itself
    status: str | None
    reason: str | None
    failed_step: str | None
    via: str | None
    path: Path  # nodes/<host>/ (absent when that node's results never arrived)


NODE_TEXTS = ("status", "reason", "failed_step", "via")


def cache_state(cell_json: dict[str, Any]) -> str | None:
    """What the server's caches were when the cell's bench began: `fresh start` (this cell
    started the server), `reset` (a shared server's cache was reset first), `NOT reset (...)`
    (the reset was refused or failed: the cell ran on the previous cell's warm cache), `shared,
    no reset declared`; None for a cell without a server session."""
    session = cell_json.get("session")
    if not isinstance(session, dict):
        return None
    if session.get("started_server"):
        return "fresh start"
    reset = session.get("reset")
    result = reset.get("reset") if isinstance(reset, dict) else None
    if not isinstance(result, dict):
        ran = isinstance(reset, dict) and reset.get("between")
        return "shared (server.between ran, no reset)" if ran else "shared, no reset declared"
    if result.get("ok"):
        return "reset"
    return f"{NOT_RESET} ({reset_answer(result)}): ran on the previous cell's warm cache"


NOT_RESET = "NOT reset"


def reset_answer(result: Mapping[str, Any]) -> str:
    """What a cache reset got (the runner's record of its POST): `HTTP 404 from URL`."""
    status = result.get("status")
    why = f"HTTP {status}" if status is not None else str(result.get("error") or "no answer")
    return f"{why} from {result.get('url')}"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def node_records(cell_dir: Path) -> list[NodeRecord]:
    """The other nodes of the multi-node cell in `cell_dir`, by rank, from nodes.json: empty for
    a one-node cell or an unreadable nodes.json; an entry whose host is not a plain folder name
    (a damaged or hostile bundle) is skipped, so no path leaves the cell folder."""
    try:
        listed = json.loads((cell_dir / layout.NODES_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for entry in _list_of_dicts(listed):
        host, rank = entry.get("host"), entry.get("rank")
        if not isinstance(host, str) or not isinstance(rank, int) or isinstance(rank, bool):
            continue
        if not layout.is_node_folder_name(host):
            continue
        status, reason, step, via = (_text(entry.get(k)) for k in NODE_TEXTS)
        path = cell_dir / layout.NODES_DIR / host
        out.append(NodeRecord(host, rank, status, reason, step, via, path))
    return sorted(out, key=lambda n: n.rank)


@dataclass(frozen=True)
class RepeatRecord:
    """One benchmark run of a cell: `bench/<n>/` (measure) or `bench/warmup-<n>/`."""

    kind: str  # measure | warmup
    n: int
    path: Path

    @property
    def stdout(self) -> Path:
        """The client's stdout file."""
        return self.path / layout.STDOUT

    @property
    def stderr(self) -> Path:
        """The client's stderr file."""
        return self.path / layout.STDERR

    @cached_property
    def exit(self) -> dict[str, Any] | None:
        """exit.json: {rc, seconds, argv, timed_out}, or None when absent."""
        data = read_json(self.path / layout.EXIT_JSON)
        return data if isinstance(data, dict) else None


class CellRecord:
    """A recorded cell directory; JSON files are read on first use.

    Absent optional files read as None; a present but corrupt one raises BundleError.
    """

    def __init__(self, path: Path, run: RunSource | None = None) -> None:
        self.path = Path(path)
        self.run = run  # keeps a packed run's extraction alive as long as this record

    def __repr__(self) -> str:
        return f"CellRecord({str(self.path)!r})"

    def _json(self, name: str) -> Any:
        """A JSON object of the cell, None when absent; BundleError when it is something else."""
        data = read_json(self.path / name)
        if data is not None and not isinstance(data, dict):
            raise BundleError(f"{self.path / name}: not a JSON object", hint=DAMAGED)
        return data

    @property
    def bundle_name(self) -> Path:
        """What a person calls the bundle this cell is in: its run's source, else its folder."""
        return self.run.source if self.run is not None else self.path

    def document(self, name: str, problems: list[str]) -> Any:
        """A JSON file of the cell (a `layout` name), None when absent or unreadable (noted)."""
        data = read_json_noting(self.path / name, problems)
        if name == CELL_JSON:
            check_schema(data, self.bundle_name)
        return data

    def capture_documents(self, problems: list[str]) -> dict[str, Any]:
        """Every capture as `{"<name>.<moment>": parsed JSON}` (unreadable ones noted)."""
        cdir = self.path / layout.CAPTURES_DIR
        if not cdir.is_dir():
            return {}
        return {p.stem: read_json_noting(p, problems) for p in sorted(cdir.glob("*.json"))}

    @cached_property
    def cell_json(self) -> dict[str, Any]:
        """cell.json: {schema_version, cell, status, reason, failed_step, steps, runner}."""
        data = read_json(self.path / CELL_JSON, required=True)
        if not isinstance(data, dict):
            raise BundleError(f"{self.path / CELL_JSON}: not a JSON object")
        check_schema(data, self.bundle_name)
        problem = cell_json_problem(data)
        if problem:
            raise BundleError(f"{self.path / CELL_JSON}: {problem}", hint=DAMAGED)
        return data

    @property
    def cell(self) -> dict[str, Any]:
        """The Cell as recorded (secrets redacted)."""
        cell = self.cell_json.get("cell")
        return cell if isinstance(cell, dict) else {}

    @property
    def id(self) -> str:
        """The cell id (the directory name when cell.json lacks one)."""
        return str(self.cell.get("id") or self.path.name)

    @property
    def status(self) -> str | None:
        """The runner's status: passed | failed | interrupted."""
        status = self.cell_json.get("status")
        return None if status is None else str(status)

    @property
    def reason(self) -> str | None:
        """Why it failed, when it did."""
        reason = self.cell_json.get("reason")
        return None if reason is None else str(reason)

    @property
    def failed_step(self) -> str | None:
        """The step that stopped the cell, if any."""
        step = self.cell_json.get("failed_step")
        return None if step is None else str(step)

    @property
    def steps(self) -> dict[str, Any]:
        """{step: {status, start, end}}."""
        steps = self.cell_json.get("steps")
        return steps if isinstance(steps, dict) else {}

    @property
    def axes(self) -> dict[str, Any]:
        """The matrix point."""
        axes = self.cell.get("axes")
        return axes if isinstance(axes, dict) else {}

    @property
    def host(self) -> str | None:
        """The inventory hostname it ran on."""
        host = self.cell.get("host")
        return None if host is None else str(host)

    @cached_property
    def repo(self) -> dict[str, Any] | None:
        """repo.json: requested ref, resolved sha, dirty state, reflog."""
        return self._json(layout.REPO_JSON)  # type: ignore[no-any-return]

    @cached_property
    def env_check(self) -> dict[str, Any] | None:
        """env_check.json: expected vs observed environment per server process."""
        return self._json(layout.ENV_CHECK_JSON)  # type: ignore[no-any-return]

    @cached_property
    def server(self) -> dict[str, Any] | None:
        """server.json: argv, cwd, pid, declared env."""
        return self._json(layout.SERVER_JSON)  # type: ignore[no-any-return]

    @cached_property
    def snapshot_pre(self) -> dict[str, Any] | None:
        """The probe's snapshot before the server started."""
        return self._json(layout.SNAPSHOT_PRE)  # type: ignore[no-any-return]

    @cached_property
    def snapshot_post(self) -> dict[str, Any] | None:
        """The probe's snapshot after the server stopped."""
        return self._json(layout.SNAPSHOT_POST)  # type: ignore[no-any-return]

    @cached_property
    def metrics(self) -> dict[str, Any] | None:
        """metrics.json (written by the controller), or None if absent."""
        return self._json(layout.METRICS_JSON)  # type: ignore[no-any-return]

    @property
    def events(self) -> list[dict[str, Any]]:
        """events.jsonl as a list (lines that are not JSON objects are skipped)."""
        path = self.path / layout.EVENTS
        out: list[dict[str, Any]] = []
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return out
        except OSError as exc:
            raise BundleError(f"{path}: cannot read: {exc}") from None
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out

    @property
    def captures(self) -> dict[str, dict[str, Path]]:
        """{capture name: {moment: path}} from captures/<name>.<moment>.json."""
        out: dict[str, dict[str, Path]] = {}
        cdir = self.path / layout.CAPTURES_DIR
        if not cdir.is_dir():
            return out
        for p in sorted(cdir.glob("*.json")):
            stem = p.name[: -len(".json")]
            name, dot, moment = stem.rpartition(".")
            if dot:
                out.setdefault(name, {})[moment] = p
        return out

    def capture(self, name: str, moment: str) -> Any:
        """One captured JSON document, or None when it was not captured."""
        path = self.captures.get(name, {}).get(moment)
        return None if path is None else read_json(path)

    def _bench(self, kind: str) -> list[RepeatRecord]:
        bdir = self.path / layout.BENCH_DIR
        out = []
        if bdir.is_dir():
            for d in bdir.iterdir():
                m = layout.REPEAT_DIR.match(d.name)
                if d.is_dir() and m and (m.group(1) is not None) == (kind == "warmup"):
                    out.append(RepeatRecord(kind, int(m.group(2)), d))
        return sorted(out, key=lambda r: r.n)

    @property
    def repeats(self) -> list[RepeatRecord]:
        """Measured repeats bench/<n>/, in order."""
        return self._bench("measure")

    @property
    def warmups(self) -> list[RepeatRecord]:
        """Warmup runs bench/warmup-<n>/, in order."""
        return self._bench("warmup")

    @cached_property
    def nodes(self) -> list[NodeRecord]:
        """A multi-node cell's other nodes, by rank (empty for a one-node cell)."""
        return node_records(self.path)

    @property
    def logs(self) -> dict[str, Path]:
        """The full logs that exist: server.log, setup.log, events.jsonl."""
        return {n: self.path / n for n in layout.LOGS if (self.path / n).is_file()}
