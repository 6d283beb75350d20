"""A cell's verdict: runner status + adapter checks + expectations, and its metrics.json."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.analyze.cost import add_cost_metrics
from orchestrator.analyze.energy import (
    RepeatWindow,
    read_telemetry,
    repeat_metrics,
    throttle_episodes,
)
from orchestrator.analyze.engine_metrics import add_engine_metrics
from orchestrator.analyze.expect import check_all
from orchestrator.analyze.metrics import metric_units, metrics_document, summarize, values_of
from orchestrator.analyze.outputs import outputs_summary
from orchestrator.analyze.replication import starts_document
from orchestrator.cell import Cell
from orchestrator.errors import OrchError
from orchestrator.results.documents import read_json_noting
from orchestrator.results.layout import (
    CELL_JSON,
    EXIT_JSON,
    METRICS_JSON,
    OUTPUTS_JSON,
    REPEATS_JSON,
    SERVER_LOG,
    TELEMETRY_CSV,
)
from orchestrator.results.records import CellRecord, RepeatRecord
from orchestrator.runner.repeat_rule import judge


@dataclass
class Verdict:
    """What the controller concludes about one finished cell."""

    status: str  # passed | failed | interrupted
    reason: str | None
    metrics: dict[str, Any] = field(default_factory=dict)  # the metrics.json document
    # Set when the runner passed the cell and the verdict failed it: results (unparsable or
    # missing), checks (an adapter check such as a server arg or NCCL var), or expect.
    failed_step: str | None = None


def repeat_dirs(cell_dir: Path) -> list[Path]:
    """The measured repeats (not warmups) of a cell, in order."""
    return [repeat.path for repeat in CellRecord(cell_dir).repeats]


def score_cell(
    cell_dir: Path, cell: Cell, prices: Mapping[str, float | None] | None = None
) -> Verdict:
    """Parse a finished cell directory into metrics and decide pass/fail; `prices` (USD per
    GPU-hour by host, from the inventory) give the cost metrics.

    The runner's own status comes first; a parser failure, a failed adapter check (e.g. a declared
    NCCL variable NCCL never reported) in strict mode, or a missed expectation fails the cell.
    """
    cell_json = _read_json(cell_dir / CELL_JSON) or {}
    status = str(cell_json.get("status") or "failed")
    reason = cell_json.get("reason")
    problems: list[str] = []

    repeats: list[dict[str, Any]] = []
    sources: dict[str, Any] = {}
    notes: list[str] = []
    start_of: dict[int, int] = {}  # `bench.starts`: each repeat's server start (exit.json)
    for rdir in repeat_dirs(cell_dir):
        try:
            result = bench_adapter(cell.bench.adapter).parse_repeat_with_sources(rdir, cell)
        except (OrchError, OSError, ValueError) as exc:
            problems.append(f"bench repeat {rdir.name}: cannot parse results: {exc}")
            continue
        repeats.append({"n": int(rdir.name), **result.metrics})
        recorded = read_json_noting(rdir / EXIT_JSON, [])
        if isinstance(recorded, dict) and isinstance(recorded.get("server_start"), int):
            start_of[int(rdir.name)] = recorded["server_start"]
        sources.update(result.sources)
        notes.extend(n for n in result.notes if n not in notes)

    checks: list[dict[str, Any]] = []
    server_facts: dict[str, Any] = {}
    server_metrics: dict[str, Any] = {}
    if cell.server is not None and (cell_dir / SERVER_LOG).exists():
        try:
            analysis = server_adapter(cell.server.adapter).analyze(cell_dir, cell)
        except (OrchError, OSError, ValueError) as exc:
            analysis = {"checks": [{"name": "server-log", "ok": False, "detail": str(exc)}]}
        checks = list(analysis.get("checks", []))
        server_facts = dict(analysis.get("facts", {}))
        server_metrics = dict(analysis.get("metrics", {}))

    telemetry = add_telemetry_metrics(cell_dir, repeats, sources)
    sampled = len(telemetry.get("gpus") or ())
    cost = add_cost_metrics(repeats, sources, cell, prices or {}, sampled)
    scraped = cell.engine_metrics
    engine = add_engine_metrics(cell_dir, scraped.engine if scraped else None, repeats, sources)
    if engine.get("note"):
        notes.append(str(engine["note"]))
    outputs = outputs_summary(_read_json(cell_dir / OUTPUTS_JSON))
    if outputs.get("accuracy") is not None:
        # one measurement per cell, on each repeat: expect, bisect and history read it as any
        # metric (its spread is 0 by construction)
        for row in repeats:
            row["accuracy"] = float(outputs["accuracy"])
    summary = summarize([{k: v for k, v in r.items() if k != "n"} for r in repeats])
    medians = {m: float(s["median"]) for m, s in summary.items()}
    recorded = {"fingerprint": str(outputs["fingerprint"])} if "fingerprint" in outputs else {}
    expectations = (
        [e.to_json() for e in check_all(cell.expect, medians, recorded)] if repeats else []
    )

    failed_step = None
    if status == "passed":
        strict = cell.server is None or cell.server.verify_env == "strict"
        failed_checks = [c for c in checks if not c.get("ok", True)] if strict else []
        problems.extend(f"{c.get('name')}: {c.get('detail')}" for c in failed_checks)
        missed = [e for e in expectations if not e["ok"]]
        problems.extend(f"expectation {e['metric']} {e['bound']}: {e['detail']}" for e in missed)
        no_results = not repeats and cell.bench.repeats > 0
        if no_results:
            problems.append("no benchmark repeat produced results")
        if problems:
            status, reason = "failed", "; ".join(problems)
            unparsed = len(problems) > len(failed_checks) + len(missed) + int(no_results)
            if unparsed or no_results:
                failed_step = "results"
            else:
                failed_step = "checks" if failed_checks else "expect"

    metrics = metrics_document(repeats, sources=sources, expectations=expectations)
    metrics.update(
        notes=notes,
        server=server_metrics,
        server_facts=server_facts,
        checks=checks,
        problems=problems,
    )
    if telemetry:
        metrics["telemetry"] = telemetry
    metrics["cost"] = cost
    if engine:
        metrics["engine_metrics"] = engine
    if outputs:
        metrics["outputs"] = outputs
        if outputs.get("stable") is False:
            notes.append("greedy outputs differed between passes of one server")
    if start_of:
        metrics["starts"] = starts_document(repeats, start_of)
    if cell.bench.settle is not None and cell.bench.settle.until is not None and repeats:
        metrics["settle"] = settle_record(cell_dir, cell, repeats)
        if not metrics["settle"]["settled"]:
            notes.append(unsettled_note(metrics["settle"]))
    server_name = cell.server.adapter if cell.server else None
    metrics["units"] = metric_units(metrics, cell.bench.adapter, server_name)
    return Verdict(status=status, reason=reason, metrics=metrics, failed_step=failed_step)


def output_tokens(metrics: dict[str, Any]) -> float | None:
    """A repeat's output tokens: reported, else output throughput × duration (same time unit)."""
    total = metrics.get("total_output_tokens")
    if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
        return float(total)
    rate, duration = metrics.get("output_throughput"), metrics.get("duration")
    if isinstance(rate, int | float) and isinstance(duration, int | float):
        product = float(rate) * float(duration)
        return product if product > 0 else None
    return None


def repeat_window(record: RepeatRecord, tokens: float | None = None) -> RepeatWindow | None:
    """A repeat's start and end (exit.json) as a telemetry window; None when not recorded."""
    try:
        doc = record.exit or {}
    except OrchError:  # a damaged exit.json: the verdict names it elsewhere
        return None
    start, end = doc.get("start"), doc.get("end")
    if not isinstance(start, int | float) or not isinstance(end, int | float) or end <= start:
        return None  # a bundle from before repeats were timed
    return RepeatWindow(record.kind, record.n, float(start), float(end), tokens)


def add_telemetry_metrics(
    cell_dir: Path, repeats: list[dict[str, Any]], sources: dict[str, Any]
) -> dict[str, Any]:
    """Put each measured repeat's telemetry metrics (energy, clocks, temperature, throttling,
    energy per output token) into `repeats` beside the bench's; returns metrics.json's
    `telemetry` block (warm-ups' metrics, throttle episodes), empty without telemetry."""
    path = cell_dir / TELEMETRY_CSV
    if not path.is_file():
        return {}
    try:
        tel = read_telemetry(path)
    except (OSError, UnicodeDecodeError):
        return {}
    if not tel.gpus:
        return {}
    record = CellRecord(cell_dir)
    by_n = {int(r["n"]): r for r in repeats}
    windows = []
    for rec in [*record.warmups, *record.repeats]:
        parsed = by_n.get(rec.n) if rec.kind == "measure" else None
        window = repeat_window(rec, output_tokens(parsed) if parsed else None)
        if window is not None:
            windows.append(window)
    per_repeat = repeat_metrics(tel, windows)
    warmups: dict[str, dict[str, float]] = {}
    for (kind, n), values in per_repeat.items():
        if kind == "warmup":
            warmups[str(n)] = values
        elif n in by_n:
            by_n[n].update(values)
            sources.update(dict.fromkeys(values, TELEMETRY_CSV))
    return {
        "file": TELEMETRY_CSV,
        "gpus": sorted(tel.gpus),
        "interval_s": round(tel.interval_s, 3),
        "warmups": warmups,
        "episodes": [e.to_dict() for e in throttle_episodes(tel, windows)],
    }


def settle_record(cell_dir: Path, cell: Cell, repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json's `settle`: the rule, the repeats run, why they stopped (the runner's word,
    bench's repeats.json) and each deciding metric's median interval, from this parse."""
    rule = cell.bench.settle
    assert rule is not None and rule.until is not None
    runner = _read_json(cell_dir / REPEATS_JSON)
    judged = {
        m: judge(values_of(repeats, m), rule.until, rule.confidence, cell.bench.repeats, rule.min)
        for m in rule.metrics
    }
    settled = bool(judged) and all(j["settled"] for j in judged.values())
    return {
        "min": rule.min,
        "max": cell.bench.repeats,
        "until": rule.until,
        "confidence": rule.confidence,
        "chosen": rule.chosen,
        "ran": len(repeats),
        "stopped": runner.get("stopped") if isinstance(runner, dict) else None,
        "settled": settled,
        "metrics": judged,
    }


def unsettled_note(block: dict[str, Any]) -> str:
    """`did not settle: ...` for a cell whose repeats reached max with a median still loose."""
    parts = []
    for metric, j in block["metrics"].items():
        if j.get("settled"):
            continue
        width = j.get("half_width")
        if j.get("unsteady"):
            parts.append(f"{metric}: {j['unsteady']}")
        elif width is None:
            parts.append(
                f"{metric}: {j['n']} values, too few for a {block['confidence']:.0%} interval"
            )
        else:
            parts.append(
                f"{metric}: median {j['median']:.4g} in [{j['low']:.4g}, {j['high']:.4g}], "
                f"±{width:.1%} > {block['until']:.1%}"
            )
    return f"did not settle in {block['ran']} repeats: " + "; ".join(parts)


def _read_json(path: Path) -> Any:
    return read_json_noting(path, [])


def record_verdict(cell_dir: Path, verdict: Verdict) -> None:
    """Write metrics.json and make cell.json carry the final verdict (the runner's kept beside).

    Every reader (show, report, diff) then sees one status: the runner may say passed while an
    expectation or an NCCL check failed the cell.
    """
    (cell_dir / METRICS_JSON).write_text(json.dumps(verdict.metrics, indent=2) + "\n")
    path = cell_dir / CELL_JSON
    doc = _read_json(path)
    if not isinstance(doc, dict):
        return
    doc.setdefault("runner_status", doc.get("status"))
    doc.setdefault("runner_reason", doc.get("reason"))
    doc["status"], doc["reason"] = verdict.status, verdict.reason
    if verdict.failed_step is not None:
        doc["failed_step"] = verdict.failed_step
    path.write_text(json.dumps(doc, indent=2) + "\n")
