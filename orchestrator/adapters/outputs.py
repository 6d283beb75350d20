"""Reading what a cell left: finite numbers, JSON and JSON-lines files, text, regex metrics;
each reader says why it found nothing instead of raising."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.adapters.base import RepeatResult
from orchestrator.cell import Cell
from orchestrator.results.layout import STDOUT


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
        text = None if match is None else match.group(1) if match.re.groups else match.group(0)
        _record_match(result, name, pattern, match is not None, text, source)


def _record_match(
    result: RepeatResult, name: str, pattern: str, matched: bool, text: str | None, source: str
) -> None:
    if not matched:
        result.notes.append(f"metric {name}: regex {pattern!r} did not match {source}")
        return
    try:
        value = float(text.strip())  # type: ignore[union-attr]
    except (TypeError, ValueError, AttributeError):
        result.notes.append(f"metric {name}: {text!r} is not a number")
        return
    if not math.isfinite(value):
        result.notes.append(f"metric {name}: {text!r} is not finite")
        return
    result.metrics[name] = value
    result.sources[name] = source


def regex_metrics_from_file(
    patterns: Mapping[str, str], path: Path, result: RepeatResult, source: str = "stdout"
) -> None:
    """`apply_regex_metrics` on a file without holding it as text: an ASCII pattern (nearly all)
    searches the file's bytes, so a 100 MB log costs its bytes once, not a decoded copy up to
    four times their size (one astral character makes Python store every character in 4 bytes).
    A pattern with other characters reads the decoded text, as before."""
    try:
        data = path.read_bytes()
    except OSError:
        result.notes.append(f"{source} is missing: regex metrics not read")
        return
    ascii_patterns = {k: v for k, v in patterns.items() if v.isascii()}
    for name, pattern in patterns.items():
        if name not in ascii_patterns:
            continue
        match = re.search(pattern.encode("ascii"), data, re.MULTILINE)
        found = None
        if match is not None:
            raw = match.group(1) if match.re.groups else match.group(0)
            found = None if raw is None else raw.decode("utf-8", errors="replace")
        _record_match(result, name, pattern, match is not None, found, source)
    others = {k: v for k, v in patterns.items() if k not in ascii_patterns}
    if others:
        apply_regex_metrics(others, data.decode("utf-8", errors="replace"), result, source)


def read_text(path: Path) -> str | None:
    """A text file's contents, or None when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def json_report_repeat(
    repeat_dir: Path,
    cell: Cell,
    default_name: str,
    read: Callable[[Mapping[str, Any]], tuple[dict[str, float], list[str]]],
) -> RepeatResult:
    """A repeat of a client that writes one JSON report (GuideLLM, AIPerf): `read`'s metrics,
    each sourced to the file, its notes, then the playbook's regex metrics from stdout."""
    result = RepeatResult()
    name = cell.bench.result_file or default_name
    data, problem = read_json(repeat_dir / name)
    if not isinstance(data, Mapping):
        result.notes.append(problem or f"{name} is not a JSON object")
    else:
        metrics, notes = read(data)
        result.notes += notes
        for key, value in metrics.items():
            result.metrics[key] = value
            result.sources[key] = name
    if cell.bench.metrics:
        regex_metrics_from_file(cell.bench.metrics, repeat_dir / STDOUT, result)
    return result
