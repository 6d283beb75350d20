"""The generic adapters: any command as a server or benchmark, metrics from JSON or regexes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.adapters.base import BenchAdapter, RepeatResult, ServerAdapter
from orchestrator.adapters.outputs import finite_float, read_text, regex_metrics_from_file
from orchestrator.adapters.sections import (
    as_mapping,
    build_captures,
    build_ready,
    common_bench_fields,
    common_server_fields,
    get_port,
    get_str,
    split_command,
)
from orchestrator.cell import BenchSpec, Cell, ServerSpec, Watch
from orchestrator.errors import InputError
from orchestrator.results.layout import STDOUT


def _require_command(section: Mapping[str, Any]) -> list[str]:
    if section.get("command") is None:
        raise InputError(
            "the generic adapter needs a command",
            key_path="command",
            hint="give command: [argv...], or pick an adapter such as sglang",
        )
    if section.get("python") is not None:
        # It would be ignored: the command is run as written, so say so rather than run another
        # interpreter than the one the playbook names.
        raise InputError(
            "the generic adapter runs command as written and has no use for python",
            key_path="python",
            hint="put the interpreter in command: [/venv/bin/python, -m, module, ...]",
        )
    return split_command(section["command"], "command")


class GenericServer(ServerAdapter):
    """A server started from `command` as given; `args` are only recorded.

    Readiness comes from `ready.url`, or `ready.path` joined to host:port (a wildcard host is
    probed on 127.0.0.1), and/or the `ready.log` regex. With none of them the runner has nothing
    to wait for.
    """

    name = "generic"

    def build(self, section: Mapping[str, Any]) -> ServerSpec:
        """ServerSpec from `command`, `host`, `port`, `ready`, `captures` and the common keys."""
        argv = _require_command(section)
        host = get_str(section, "host", None, "host")
        port = get_port(section, "port", None, "port")
        return ServerSpec(
            adapter=self.name,
            argv=tuple(argv),
            port=port,
            ready=build_ready(section, host=host, port=port),
            captures=build_captures(section, host=host, port=port),
            args=as_mapping(section.get("args"), "args"),
            **common_server_fields(section),
        )


def json_metrics(path: Path, result: RepeatResult) -> None:
    """Numeric top-level fields of a JSON object file (or a JSONL file's last line) as metrics."""
    text = read_text(path)
    if text is None:
        result.notes.append(f"result file {path.name} is missing or unreadable")
        return
    data: Any = None
    try:
        data = json.loads(text)
        origin = path.name
    except json.JSONDecodeError:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:
            data = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            data = None
        origin = f"{path.name} (last line)"
    if not isinstance(data, dict):
        result.notes.append(f"result file {path.name} holds no JSON object")
        return
    for key, value in data.items():
        number = finite_float(value)
        if number is not None:
            result.metrics[str(key)] = number
            result.sources[str(key)] = origin


class GenericBench(BenchAdapter):
    """A benchmark from `command`; metrics from `result_file` (JSON/JSONL) and stdout regexes."""

    name = "generic"
    open_ended = True  # whatever numbers the result file holds, plus the declared regexes

    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """BenchSpec from `command`, `result_file`, `metrics` and the common keys."""
        argv = _require_command(section)
        return BenchSpec(
            adapter=self.name,
            argv=tuple(argv),
            result_file=get_str(section, "result_file", None, "result_file"),
            args=as_mapping(section.get("args"), "args"),
            **common_bench_fields(section),
        )

    def watch(self, spec: BenchSpec, metric: str) -> Watch | None:
        """A regex metric from stdout, else the result file's field of that name."""
        found = super().watch(spec, metric)
        if found is None and spec.result_file:
            found = Watch(metric=metric, file=spec.result_file, format="json", key=metric)
        return found

    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """Result-file fields first, then regex metrics on stdout (a regex wins on a clash)."""
        result = RepeatResult()
        if cell.bench.result_file:
            json_metrics(repeat_dir / cell.bench.result_file, result)
        if cell.bench.metrics:
            regex_metrics_from_file(cell.bench.metrics, repeat_dir / STDOUT, result)
        return result
