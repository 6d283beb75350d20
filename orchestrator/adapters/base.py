"""What every adapter shares: the two interfaces and the small pure helpers they are built from.

Adapters are pure: `build()` turns a rendered playbook section into a `ServerSpec`/`BenchSpec`,
and the parsers read plain files of a cell directory. Nothing here starts a process or prints.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from orchestrator.adapters.flags import scalar_text
from orchestrator.cell import BenchSpec, Capture, Cell, ReadyCheck, ServerSpec
from orchestrator.errors import InputError, is_known_secret

# Hosts a server binds to that are not addresses a client can connect to.
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


@dataclass
class RepeatResult:
    """What one benchmark run gave: metrics, where each came from, and what could not be read.

    `sources` maps a metric name to a short label of its origin (e.g. `accept_length` ->
    `server_info_delta`); `notes` says in words what was missing or approximated.
    """

    metrics: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


Better = Literal["higher", "lower", "neither"]


@dataclass(frozen=True)
class MetricInfo:
    """One metric an adapter can report: its unit (one per quantity across adapters: rates of
    acceptance are fractions, times ms or s), which way is better, where it is read from, and
    the client versions that write it (empty: every version)."""

    name: str
    unit: str
    better: Better
    source: str
    versions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The entry as `orch metrics --json` prints it."""
        return {
            "name": self.name,
            "unit": self.unit,
            "better": self.better,
            "source": self.source,
            "versions": list(self.versions),
        }


class ServerAdapter(ABC):
    """How a serving engine's `server:` section becomes a process, and what its logs say."""

    name: ClassVar[str]

    @abstractmethod
    def build(self, section: Mapping[str, Any]) -> ServerSpec:
        """Turn the rendered `server:` section (args merged into one dict) into a ServerSpec."""

    def analyze(self, cell_dir: Path, cell: Cell) -> dict[str, Any]:
        """Read a finished cell directory: {"metrics": {}, "facts": {}, "checks": []}."""
        return {"metrics": {}, "facts": {}, "checks": []}

    def reset_url(self, spec: ServerSpec) -> str | None:
        """What to POST between two cells sharing one server (a cache flush), if anything."""
        return None

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """The metrics `analyze` may report (metrics.json's `server` block)."""
        return ()


class BenchAdapter(ABC):
    """How a benchmark client's `bench:` section becomes argv, and its output becomes metrics."""

    name: ClassVar[str]

    @abstractmethod
    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """Turn the rendered `bench:` section into a BenchSpec aimed at `server`."""

    @abstractmethod
    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """Metrics of one run (a `bench/<n>` or `bench/warmup-<n>` dir) with their sources."""

    # An open-ended adapter reports whatever its client writes: expect: names are not checked.
    open_ended: ClassVar[bool] = False
    # Names a metric had before, with what to write now (validate says so instead of guessing).
    renamed: ClassVar[dict[str, str]] = {}

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """Every metric a repeat may report (regex metrics under `metrics:` come on top)."""
        return ()

    def knows(self, name: str) -> bool:
        """Whether `name` is a metric this adapter can report (see `catalogue`)."""
        return any(info.name == name for info in self.catalogue())

    def parse_repeat(self, repeat_dir: Path, cell: Cell) -> dict[str, float]:
        """Metrics of one run, as floats (see `parse_repeat_with_sources` for provenance)."""
        return self.parse_repeat_with_sources(repeat_dir, cell).metrics


# --- section helpers -------------------------------------------------------------------------


def as_mapping(value: Any, key_path: str) -> dict[str, Any]:
    """`value` as a dict (None -> {}), or an InputError naming `key_path`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"expected a mapping, got {type(value).__name__}", key_path=key_path)
    return {str(k): v for k, v in value.items()}


def split_command(value: Any, key_path: str) -> list[str]:
    """argv from a list of scalars, or from a string split like a shell would (no shell runs)."""
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise InputError(f"cannot split command: {exc}", key_path=key_path) from None
    elif isinstance(value, list | tuple):
        argv = []
        for i, item in enumerate(value):
            if isinstance(item, dict | list | tuple) or item is None:
                raise InputError(
                    f"argv items must be scalars, got {type(item).__name__}",
                    key_path=f"{key_path}[{i}]",
                )
            argv.append(scalar_text(item))
    else:
        raise InputError(
            f"expected a string or a list, got {type(value).__name__}", key_path=key_path
        )
    if not argv:
        raise InputError("command is empty", key_path=key_path)
    return argv


def _quoted(value: Any) -> str:
    """`value` as a message quotes it: a secret's value (one from a secret-named variable)
    is named as such, never shown."""
    return "a secret value" if is_known_secret(str(value)) else repr(value)


def get_int(section: Mapping[str, Any], key: str, default: int | None, key_path: str) -> int | None:
    """An integer setting (a digit string is accepted: rendering may give one)."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise InputError("expected an integer, got a boolean", key_path=key_path)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise InputError(f"expected an integer, got {_quoted(value)}", key_path=key_path)


def get_port(
    section: Mapping[str, Any], key: str, default: int | None, key_path: str
) -> int | None:
    """A TCP port setting: an integer from 1 to 65535 (a digit string is accepted)."""
    port = get_int(section, key, default, key_path)
    if port is not None and not 0 < port < 65536:
        raise InputError(f"expected a port number (1-65535), got {port}", key_path=key_path)
    return port


def get_float(
    section: Mapping[str, Any], key: str, default: float | None, key_path: str
) -> float | None:
    """A float setting (ints and numeric strings accepted)."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise InputError("expected a number, got a boolean", key_path=key_path)
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {_quoted(value)}", key_path=key_path) from None
    if not math.isfinite(result) or result < 0:
        raise InputError(f"expected a finite number >= 0, got {_quoted(value)}", key_path=key_path)
    return result


def get_str(section: Mapping[str, Any], key: str, default: str | None, key_path: str) -> str | None:
    """A string setting; numbers are accepted and turned into text."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"expected a string, got {type(value).__name__}", key_path=key_path)
    return str(value)


def probe_host(host: str | None) -> str:
    """Where a client connects to reach a server bound to `host` (wildcards -> loopback)."""
    if host is None or host.strip() in _WILDCARD_HOSTS:
        return "127.0.0.1"
    host = host.strip()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"  # an IPv6 literal needs brackets in a URL
    return host


def base_url(host: str | None, port: int) -> str:
    """`http://host:port` for a client of a server bound to `host`."""
    return f"http://{probe_host(host)}:{port}"


def server_url(server: ServerSpec | None) -> str | None:
    """`http://host:port` of a server spec: from its ready URL's host, else its args' host."""
    if server is None or server.port is None:
        return None
    host: str | None = None
    if server.ready.url:
        host = urlsplit(server.ready.url).hostname
    if host is None:
        raw = server.args.get("host")
        host = str(raw) if raw is not None else None
    return base_url(host, server.port)


def _join_url(base: str, path: str) -> str:
    if path.startswith(("http://", "https://")):
        return path
    return base + (path if path.startswith("/") else "/" + path)


def build_ready(
    section: Mapping[str, Any],
    *,
    host: str | None,
    port: int | None,
    default_path: str | None = None,
    default_log: str | None = None,
    default_timeout: float = 600.0,
) -> ReadyCheck:
    """The readiness check: the adapter's defaults with every key the user wrote on top.

    `url` (a full URL) or `path` (joined to host:port) replaces the default URL; an explicit
    `url: null` / `log: null` turns that half of the check off.
    """
    ready = as_mapping(section.get("ready"), "ready")
    unknown = sorted(set(ready) - {"url", "path", "status", "log", "timeout", "interval"})
    if unknown:
        raise InputError(
            f"unknown key {unknown[0]!r}",
            key_path=f"ready.{unknown[0]}",
            hint="ready takes url, path, status, log, timeout, interval",
        )
    if ready.get("url") is not None and ready.get("path") is not None:
        raise InputError("give ready.url or ready.path, not both", key_path="ready.path")

    url: str | None = None
    path = get_str(ready, "path", None, "ready.path")
    explicit_url = get_str(ready, "url", None, "ready.url")
    if explicit_url is not None:
        url = explicit_url
    elif path is not None:
        if port is None:
            raise InputError(
                "ready.path needs a port to build a URL",
                key_path="ready.path",
                hint="set server.port, or give ready.url",
            )
        url = _join_url(base_url(host, port), path)
    elif "url" not in ready and default_path is not None and port is not None:
        url = _join_url(base_url(host, port), default_path)

    log = get_str(ready, "log", None, "ready.log")
    if log is None and "log" not in ready:
        log = default_log
    if log is not None:
        try:
            re.compile(log)
        except re.error as exc:
            raise InputError(f"invalid regex: {exc}", key_path="ready.log") from None

    status = get_int(ready, "status", 200, "ready.status")
    timeout = get_float(ready, "timeout", default_timeout, "ready.timeout")
    interval = get_float(ready, "interval", 0.5, "ready.interval")
    assert status is not None and timeout is not None and interval is not None
    return ReadyCheck(url=url, status=status, log=log, timeout=timeout, interval=interval)


_CAPTURE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def build_captures(
    section: Mapping[str, Any],
    *,
    host: str | None,
    port: int | None,
    default: list[dict[str, Any]] | None = None,
) -> tuple[Capture, ...]:
    """Captures from the section (or the adapter default), with paths made full URLs.

    A path such as `/server_info` becomes `http://127.0.0.1:30000/server_info`, so the runner
    never has to guess the server's address.
    """
    raw = section.get("captures")
    if raw is None:  # not written (or null): the adapter's default; [] means none
        raw = default
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise InputError("expected a list of {name, urls}", key_path="captures")
    captures: list[Capture] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        kp = f"captures[{i}]"
        entry = as_mapping(item, kp)
        name = get_str(entry, "name", None, f"{kp}.name")
        if not name or not _CAPTURE_NAME.match(name):
            raise InputError(
                "a capture needs a name of letters, digits, '-' or '_'", key_path=f"{kp}.name"
            )
        if name in seen:
            raise InputError(f"duplicate capture name {name!r}", key_path=f"{kp}.name")
        seen.add(name)
        urls_raw = entry.get("urls", entry.get("url"))
        urls_list = [urls_raw] if isinstance(urls_raw, str) else urls_raw
        if not isinstance(urls_list, list | tuple) or not urls_list:
            raise InputError("a capture needs urls: [path or URL, ...]", key_path=f"{kp}.urls")
        urls: list[str] = []
        for j, u in enumerate(urls_list):
            if not isinstance(u, str) or not u:
                raise InputError("expected a path or URL", key_path=f"{kp}.urls[{j}]")
            if u.startswith(("http://", "https://")):
                urls.append(u)
            elif port is None:
                raise InputError("a capture path needs a server port", key_path=f"{kp}.urls[{j}]")
            else:
                urls.append(_join_url(base_url(host, port), u))
        captures.append(Capture(name=name, urls=tuple(urls)))
    return tuple(captures)


def common_server_fields(section: Mapping[str, Any]) -> dict[str, Any]:
    """cwd, stop_grace and verify_env, validated, for ServerSpec(**...)."""
    out: dict[str, Any] = {}
    cwd = get_str(section, "cwd", None, "cwd")
    if cwd is not None:
        out["cwd"] = cwd
    grace = get_float(section, "stop_grace", None, "stop_grace")
    if grace is not None:
        out["stop_grace"] = grace
    verify = section.get("verify_env")
    if verify is not None:
        if verify not in ("strict", "warn", "off"):
            raise InputError(f"expected strict, warn or off, got {verify!r}", key_path="verify_env")
        out["verify_env"] = verify
    restart = section.get("restart")
    if node_of(section) is not None:
        # Server sessions are one host's: a server over several hosts starts with each cell.
        restart = "per_cell"
    if restart is not None:
        if restart not in ("per_config", "per_cell"):
            raise InputError(
                f"expected per_config or per_cell, got {restart!r}", key_path="restart"
            )
        out["restart"] = restart
    between = section.get("between")
    if between is not None:
        out["between"] = tuple(split_command(between, "between"))
    return out


def common_bench_fields(section: Mapping[str, Any]) -> dict[str, Any]:
    """warmup, repeats, timeout and regex metrics, validated, for BenchSpec(**...)."""
    out: dict[str, Any] = {}
    warmup = get_int(section, "warmup", None, "warmup")
    if warmup is not None:
        out["warmup"] = warmup
    repeats = get_int(section, "repeats", None, "repeats")
    if repeats is not None:
        if repeats < 1:
            raise InputError("repeats must be at least 1", key_path="repeats")
        out["repeats"] = repeats
    timeout = get_float(section, "timeout", None, "timeout")
    if timeout is not None:
        out["timeout"] = timeout
    out["metrics"] = regex_metrics(section.get("metrics"))
    return out


def regex_metrics(value: Any) -> dict[str, str]:
    """`metrics: {name: regex}`, each regex compiled once here so bad ones fail early."""
    metrics = as_mapping(value, "metrics")
    for name, pattern in metrics.items():
        if not isinstance(pattern, str):
            raise InputError("expected a regex string", key_path=f"metrics.{name}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(f"invalid regex: {exc}", key_path=f"metrics.{name}") from None
    return {k: str(v) for k, v in metrics.items()}


# --- parsing helpers -------------------------------------------------------------------------


def finite_float(value: Any) -> float | None:
    """`value` as a finite float, or None (bools, strings, NaN and infinities are not metrics)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def read_last_json_line(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The last JSON object line of a JSONL file (json.loads accepts Infinity), or a reason."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None, f"{path.name} is empty"
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        return None, f"last line of {path.name} is not JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"last line of {path.name} is not a JSON object"
    return data, None


def read_json_lines(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every JSON object line of a JSONL file, and a note for each line that is not one."""
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return [], [f"cannot read {path.name}: {exc.strerror or exc}"]
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            notes.append(f"{path.name} line {i} is not JSON")
            continue
        if isinstance(data, dict):
            rows.append(data)
        else:
            notes.append(f"{path.name} line {i} is not a JSON object")
    return rows, notes


def read_json(path: Path) -> tuple[Any, str | None]:
    """A JSON document, or None and a reason."""
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace")), None
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    except json.JSONDecodeError as exc:
        return None, f"{path.name} is not JSON: {exc}"


def apply_regex_metrics(
    patterns: Mapping[str, str], stdout: str, result: RepeatResult, source: str = "stdout"
) -> None:
    """Fill `result` from `{name: regex}` on `stdout`: the first match's first group (or the
    whole match when the regex has no group), as a float."""
    for name, pattern in patterns.items():
        match = re.search(pattern, stdout, re.MULTILINE)
        if match is None:
            result.notes.append(f"metric {name}: regex {pattern!r} did not match {source}")
            continue
        text = match.group(1) if match.re.groups else match.group(0)
        try:
            value = float(text.strip())
        except (TypeError, ValueError, AttributeError):
            result.notes.append(f"metric {name}: {text!r} is not a number")
            continue
        if not math.isfinite(value):
            result.notes.append(f"metric {name}: {text!r} is not finite")
            continue
        result.metrics[name] = value
        result.sources[name] = source


def read_text(path: Path) -> str | None:
    """A text file's contents, or None when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def node_of(section: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The node variables of a server over several hosts (plan/nodes.py), else None."""
    node = section.get("node")
    if isinstance(node, Mapping) and int(node.get("nnodes", 1)) > 1:
        return node
    return None
