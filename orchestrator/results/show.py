"""`orch show`: a run or a cell described for a person, with paths to everything whole."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tabulate import tabulate

from orchestrator.results.layout import CELLS_DIR
from orchestrator.results.read import RunBundle, run_of
from orchestrator.results.records import CellRecord, Metrics, NodeRecord, cache_state

# (recorded cell, metrics.json, metric) -> unit: the analyze layer's lookup, which falls back on
# the adapters' catalogues for bundles from before metrics.json recorded units
UnitOf = Callable[[Mapping[str, Any], Mapping[str, Any], str], str | None]


def recorded_unit(cell: Mapping[str, Any], metrics: Mapping[str, Any], name: str) -> str | None:
    """The unit metrics.json records for `name` (None in bundles from before units)."""
    units = metrics.get("units")
    unit = units.get(name) if isinstance(units, Mapping) else None
    return unit if isinstance(unit, str) else None


def _first_line(text: Any) -> str:
    return str(text).strip().splitlines()[0] if text else ""


def describe_run(
    run: RunBundle,
    *,
    starts: str | None = None,
    host_starts: Mapping[str, str] | None = None,
    unit_of: UnitOf = recorded_unit,
) -> str:
    """Header facts of the run and one line per cell (status and the reason's first line).

    `starts` is the run's server starts in words, `host_starts` the same per host (shown when
    there are several); the caller counts them (`analyze/starts.py`).
    """
    doc = run.run or {}
    lines = [
        f"run       {run.run_id}",
        f"path      {run.source}",
        f"playbook  {doc.get('playbook')}",
        f"status    {doc.get('status')}",
        f"started   {doc.get('started')}   finished {doc.get('finished')}",
        f"hosts     {', '.join(doc.get('hosts') or [])}",
        f"argv      {' '.join(doc.get('argv') or [])}",
    ]
    for key in ("replay_of", "resumed"):
        if doc.get(key):
            lines.append(f"{key:<9} {doc[key]}")
    if starts:
        lines.append(f"{'starts':<9} {starts}")
        if host_starts and len(host_starts) > 1:
            width = max(len(h) for h in host_starts)
            lines += [f"{'':<9}   {h:<{width}}  {text}" for h, text in host_starts.items()]
    rows = []
    for cid, entry in (doc.get("cells") or {}).items():
        record = run.cells.get(cid)
        headline = _headline(record, unit_of) if record else ""
        rows.append(
            [
                cid,
                entry.get("host"),
                entry.get("status"),
                headline,
                _first_line(entry.get("reason")) or ("" if record else "(no cell directory)"),
            ]
        )
    lines += ["", tabulate(rows, headers=["cell", "host", "status", "headline metric", "reason"])]
    if run.packed:  # run.path is a temporary extraction, deleted when the command exits
        lines.append(
            f"\ncells: {run.member(run.path / CELLS_DIR)}/ inside {run.source}"
            "  (orch show RUN/CELL for one cell's logs)"
        )
    else:
        lines.append(f"\ncells: {run.path / CELLS_DIR}  (orch show RUN/CELL for one cell's logs)")
    return "\n".join(lines)


_HEADLINE = ("output_throughput", "request_throughput")


def _headline(record: CellRecord, unit_of: UnitOf) -> str:
    """`output_throughput 93.9 tok/s` (median), or the first metric there is."""
    document = record.metrics or {}
    summary = Metrics(document).summary
    if not summary:
        return ""
    name = next((m for m in _HEADLINE if m in summary), next(iter(summary)))
    median = summary[name].get("median")
    if not isinstance(median, int | float):
        return name
    unit = unit_of(record.cell, document, name)
    settle = _dict(document.get("settle"))
    loose = " (did not settle)" if settle and not settle.get("settled") else ""
    return f"{name} {median:.4g}" + (f" {unit}" if unit else "") + loose


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def describe_cell(cell: CellRecord, *, unit_of: UnitOf = recorded_unit) -> str:
    """What ran where, the verdict and its whole reason, metrics with their units, and the paths
    of the logs."""
    spec = cell.cell
    repo = cell.repo or {}
    run = run_of(cell)
    packed = run is not None and run.packed

    def shown(path: Path) -> str:
        # A packed run is read from a temporary extraction that is gone when orch exits: name
        # paths inside the run instead, and how to extract them.
        return run.relative(path) if packed and run is not None else str(path)

    location = f"{shown(cell.path)} in {run.source}" if packed and run is not None else cell.path
    lines = [
        f"cell      {cell.id}",
        f"path      {location}",
        f"host      {cell.host}" + (" (head, rank 0)" if cell.nodes else ""),
        f"axes      {json.dumps(cell.axes, sort_keys=True)}",
        f"status    {cell.status}"
        + (f" (failed at {cell.failed_step})" if cell.failed_step else ""),
    ]
    if repo:
        lines.append(
            f"repo      {repo.get('requested')} -> {repo.get('sha')}"
            f" ({repo.get('describe')}, dirty: {repo.get('dirty')})"
        )
    for name in ("server", "bench"):
        argv = _dict(spec.get(name)).get("argv")
        if argv and isinstance(argv, list):
            lines.append(f"{name:<9} {' '.join(str(a) for a in argv)}")
    if cell.reason:
        lines += ["", "reason:", str(cell.reason)]
    metrics = Metrics(cell.metrics or {})
    summary = metrics.summary
    if summary:
        units = {m: unit_of(spec, cell.metrics or {}, m) or "" for m in summary}
        rows = [
            [m, units[m], s.get("median"), s.get("min"), s.get("max"), s.get("n")]
            for m, s in summary.items()
        ]
        lines += ["", tabulate(rows, headers=["metric", "unit", "median", "min", "max", "n"])]
    lines += engine_lines(cell.metrics or {}, lambda m: unit_of(spec, cell.metrics or {}, m))
    settle = _dict((cell.metrics or {}).get("settle"))
    if settle:
        lines.append(settle_line(settle))
    if summary:
        headline = next((m for m in _HEADLINE if m in summary), next(iter(summary)))
        lines.append(starts_line(cell.metrics or {}, headline))
    outputs = _dict((cell.metrics or {}).get("outputs"))
    if outputs.get("fingerprint"):  # the digest `expect: {fingerprint: {equal}}` compares
        agree = outputs.get("stable")
        stable = "" if agree is None else (", passes agree" if agree else ", passes DIFFER")
        lines.append(
            f"outputs   fingerprint {outputs['fingerprint']} ({outputs.get('prompts')} prompts,"
            f" {outputs.get('hashed')} hashed{stable})"
        )
    for exp in metrics.expectations:
        mark = "ok  " if exp.get("ok") else "MISS"
        lines.append(f"expect {mark} {exp.get('metric')} {exp.get('bound')}: {exp.get('detail')}")
    for check in metrics.checks:
        if not check.get("ok", True):
            lines.append(f"check FAIL {check.get('name')}: {check.get('detail')}")
    notes = (cell.metrics or {}).get("notes")
    for note in notes if isinstance(notes, list) else ():
        if isinstance(note, str) and note.startswith("flag: "):  # an adapter's doubt on its numbers
            lines.append(note)
    env = cell.env_check or {}
    if env:
        lines.append(f"\nenv check {env.get('mode')}: {'ok' if env.get('ok') else 'MISMATCH'}")
        unverified = env.get("unverified")
        if isinstance(unverified, list) and unverified:
            whys = sorted({str(_dict(u).get("why")) for u in unverified})
            lines.append(
                f"          {len(unverified)} process(es) not verified: environ {'; '.join(whys)}"
            )
    cache = cache_state(cell.cell_json)
    if cache is not None and cache != "fresh start":
        lines.append(f"cache     {cache}")
    lines.append("\nfiles:" + (" (paths inside the packed run)" if packed else ""))
    for name, path in cell.logs.items():
        lines.append(f"  {name:<12} {shown(path)}")
    for rep in cell.repeats:
        lines.append(f"  bench {rep.path.name:<6} {shown(rep.path)}")
    lines += _node_lines(cell.nodes, shown)
    if packed and run is not None:
        archive = shlex.quote(str(run.source))
        lines.append(f"extract with: tar -xzf {archive} {shlex.quote(run.member(cell.path))}")
    return "\n".join(lines)


def engine_lines(metrics: Mapping[str, Any], unit: Callable[[str], str | None]) -> list[str]:
    """The engine's /metrics per measured repeat (metric rows, repeat columns) and what the
    engine lacked, from metrics.json's `engine_metrics` block; none without it."""
    block = _dict(metrics.get("engine_metrics"))
    if not block:
        return []
    repeats = [r for r in metrics.get("repeats") or [] if isinstance(r, dict)]
    names = [m for m in dict.fromkeys(k for r in repeats for k in r) if m.startswith("engine_")]
    lines = ["", f"engine /metrics ({block.get('engine')}), per repeat ({block.get('file')}):"]
    if names:
        header = ["metric", "unit", *(f"#{r.get('n')}" for r in repeats)]
        rows = [[m, unit(m) or "", *(r.get(m, "-") for r in repeats)] for m in names]
        lines.append(tabulate(rows, headers=header))
    lines += absent_lines(block)
    return lines


def absent_lines(block: Mapping[str, Any]) -> list[str]:
    """`engine /metrics (vllm) lacks spec_...: why`, one line per reason, for what a cell's
    engine did not serve (metrics.json's `engine_metrics.absent`): said, never a zero."""
    absent = block.get("absent")
    if not isinstance(absent, Mapping) or not absent:
        return []
    by_reason: dict[str, list[str]] = {}
    for metric, why in absent.items():
        by_reason.setdefault(str(why), []).append(str(metric).removeprefix("engine_"))
    engine = block.get("engine") or "?"
    return [
        f"engine /metrics ({engine}) lacks {', '.join(names)}: {why}"
        for why, names in by_reason.items()
    ]


def settle_line(settle: dict[str, Any]) -> str:
    """`repeats   5 of 3..12: settled, output_throughput ±1.2% (90% interval, until 2%)`, or
    `did not settle` with each loose metric's interval."""
    head = f"repeats   {settle.get('ran')} of {settle.get('min')}..{settle.get('max')}: "
    until = f"until {_pct(settle.get('until'))}, {_pct(settle.get('confidence'), 0)} interval"
    parts = []
    for metric, j in _dict(settle.get("metrics")).items():
        j = _dict(j)
        if j.get("half_width") is None:
            parts.append(f"{metric} {j.get('n')} values, no interval yet")
        else:
            parts.append(
                f"{metric} {j.get('median'):.4g} [{j.get('low'):.4g}, {j.get('high'):.4g}] "
                f"±{_pct(j.get('half_width'))}"
            )
    state = "settled" if settle.get("settled") else "DID NOT SETTLE"
    return head + f"{state}, " + "; ".join(parts) + f" ({until})"


def starts_line(metrics: dict[str, Any], metric: str) -> str:
    """`starts    3 server starts: output_throughput start-to-start sd 1.90 %, ...` from
    metrics.json's `starts` record (analyze/replication.py wrote it), or that one start left
    the start-to-start spread unmeasured."""
    spread = _dict(_dict(_dict(metrics.get("starts")).get("metrics")).get(metric))
    between, within = spread.get("between_start_sd"), spread.get("within_start_sd")
    if not isinstance(between, int | float):
        return "starts    one server start: start-to-start spread not measured"
    effective = spread.get("effective_replicates")
    worth = (
        f"; {effective:.1f} effective replicates of {spread.get('repeats')}"
        if isinstance(effective, int | float)
        else ""
    )
    within_text = f"{100 * within:.2f} %" if isinstance(within, int | float) else "?"
    return (
        f"starts    {spread.get('starts')} server starts: {metric} start-to-start sd "
        f"{100 * between:.2f} %, within-start sd {within_text}{worth}"
    )


def _pct(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}%}" if isinstance(value, int | float) else "?"


def _node_lines(nodes: list[NodeRecord], shown: Callable[[Path], str]) -> list[str]:
    """One line per other node of a multi-node cell: rank, host, status, its folder, and the
    first line of its reason when it failed (the whole reason is in the node's cell.json, and
    the cell's own reason names the node first; the head's lines are the cell's own, above)."""
    if not nodes:
        return []
    width = max(len(n.host) for n in nodes)
    lines = [f"\nnodes: ({len(nodes) + 1} in all; the head's files are the cell's own)"]
    for node in nodes:
        folder = shown(node.path) + ("/" if node.path.is_dir() else " (not there)")
        line = f"  rank {node.rank}  {node.host:<{width}}  {node.status or '?':<7} {folder}"
        if node.via:
            line += f"  via {node.via}"
        if node.status != "passed":
            step = f"at {node.failed_step}: " if node.failed_step else ""
            line += f"  {step}{_first_line(node.reason) or 'no reason recorded'}"
            if len(str(node.reason).strip().splitlines()) > 1:
                line += " (more in its cell.json)"
        lines.append(line)
    return lines
