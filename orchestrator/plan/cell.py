"""A Cell: one matrix point on one host, fully rendered (no templates left).

The Cell is the contract between planning and execution: the controller sends it as JSON to
the runner on the host, the bundle stores it, and `orch diff` pairs cells across runs by `id`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CELL_SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RepoPin(_Frozen):
    """The serving repo, pinned: the runner checks it out and verifies HEAD as a full SHA."""

    url: str
    dest: str  # absolute, or relative to the host's $HOME
    version: str  # the requested ref (branch, tag, short or full SHA)
    setup: str | None = None  # shell command run in dest once per (commit, setup)
    dirty: Literal["refuse", "reset", "record"] = "refuse"
    setup_timeout: float = 3600.0


class ReadyCheck(_Frozen):
    """How the runner decides the server is up: an HTTP status, a log regex, or both."""

    url: str | None = None  # full URL, e.g. http://127.0.0.1:30000/health_generate
    status: int = 200
    log: str | None = None  # regex searched in server.log
    timeout: float = 600.0
    interval: float = 0.5


class Capture(_Frozen):
    """A JSON document fetched from the server after readiness and after each repeat."""

    name: str  # file stem in the cell dir: captures/<name>.<moment>.json
    urls: tuple[str, ...]  # full URLs tried in order; the first 200 wins


class ServerSpec(_Frozen):
    """A long-running server started in its own process group with exactly `Cell.env` on top."""

    adapter: str = "generic"
    argv: tuple[str, ...]
    cwd: str | None = None  # default: the repo dest when there is a repo, else the cell dir
    port: int | None = None  # checked free before start and after stop
    ready: ReadyCheck = Field(default_factory=ReadyCheck)
    captures: tuple[Capture, ...] = ()
    stop_grace: float = 15.0
    verify_env: Literal["strict", "warn", "off"] = "strict"
    args: dict[str, Any] = Field(default_factory=dict)  # the flag mapping the argv came from


class BenchSpec(_Frozen):
    """A benchmark client run `warmup` + `repeats` times, each in its own directory as cwd."""

    adapter: str = "generic"
    argv: tuple[str, ...]
    warmup: int = 0
    repeats: int = 1
    timeout: float = 3600.0  # per run
    result_file: str | None = None  # relative to the repeat dir, written by the client
    metrics: dict[str, str] = Field(default_factory=dict)  # generic: name -> regex on stdout
    args: dict[str, Any] = Field(default_factory=dict)


class Expectation(_Frozen):
    """Bounds for one metric: min/max, or a reference with a relative tolerance (0.05 = 5%)."""

    min: float | None = None
    max: float | None = None
    ref: float | None = None
    tolerance: float | None = None


class SnapshotSpec(_Frozen):
    """What the host snapshots record besides the defaults (observation only: not in the id)."""

    pip_freeze: bool = True
    topo: bool = True


class Cell(_Frozen):
    """One matrix point on one host, fully rendered."""

    schema_version: int = CELL_SCHEMA_VERSION
    id: str
    playbook: str  # the playbook's name
    host: str  # inventory hostname
    axes: dict[str, Any]  # axis name -> the value as declared in the matrix
    repo: RepoPin | None = None
    env: dict[str, str] = Field(default_factory=dict)  # merged, stringified; verified in the server
    secrets: tuple[str, ...] = ()  # env/var names whose values must never reach a bundle
    server: ServerSpec | None = None
    bench: BenchSpec
    expect: dict[str, Expectation] = Field(default_factory=dict)
    cell_timeout: float = 4 * 3600.0
    snapshot: SnapshotSpec = Field(default_factory=SnapshotSpec)


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def slug_part(value: Any) -> str:
    """One axis value as a short, filesystem-safe piece of a cell id."""
    if isinstance(value, dict | list):
        value = canonical_json(value)
    text = _SLUG_BAD.sub("-", str(value)).strip("-.")
    return text[:24] or "x"


def cell_id(axes: dict[str, Any], host: str, spec: Any) -> str:
    """A readable slug of the axis values plus a short hash of the rendered spec.

    `spec` is everything that defines the cell except its id (canonical JSON is hashed), so the
    same cell gets the same id in every run and on every machine.
    """
    slug = "-".join(slug_part(axes[k]) for k in axes) or "cell"
    digest = hashlib.sha256(canonical_json([host, spec]).encode()).hexdigest()[:8]
    return f"{slug[:80]}-{digest}"
