"""`orch diff` printed: text with the likely causes first (long sections written whole to a
file), or the complete diff as JSON."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from tabulate import tabulate

from orchestrator.analyze.diff.image import image_headline
from orchestrator.analyze.diff.model import (
    SECTION_ORDER,
    SECTION_TITLES,
    CellDiff,
    CellRef,
    Entry,
    HostLoad,
    MetricDelta,
    RunDiff,
    Section,
    show_value,
)
from orchestrator.analyze.metrics import format_number
from orchestrator.analyze.slo import capacity_line
from orchestrator.analyze.stats import OUTLIER_MADS, OUTLIER_MIN_RELATIVE, UNSTABLE_SPREAD

# --- rendering ---------------------------------------------------------------------------------


def _entry_lines(entry: Entry) -> list[str]:
    ta, tb = show_value(entry.a), show_value(entry.b)
    note = f"  ({entry.note})" if entry.note else ""
    if "\n" in ta or "\n" in tb or len(ta) + len(tb) > 90:
        lines = [f"  {entry.key}:{note}"]
        lines += ["    A: " + line for line in ta.splitlines() or [""]]
        lines += ["    B: " + line for line in tb.splitlines() or [""]]
        return lines
    return [f"  {entry.key}: {ta} -> {tb}{note}"]


def _test_text(m: MetricDelta) -> str:
    if m.p_value is None:
        return f"{m.method}"
    reach = f"; {m.cannot_reach}" if m.cannot_reach else ""
    if m.p_adjusted is not None and m.family > 1:
        return f"{m.method}, p={m.p_value:.3g}, Holm p={m.p_adjusted:.3g} over {m.family}{reach}"
    return f"{m.method}, p={m.p_value:.3g}{reach}"


def _repeats_text(m: MetricDelta) -> str:
    """Outlying repeats and a high spread, per side; '' when the repeats look steady."""
    parts = []
    for side, outliers, spread in (
        ("A", m.outliers_a, m.spread_a),
        ("B", m.outliers_b, m.spread_b),
    ):
        if outliers:
            shown = ", ".join(f"#{o.repeat}={format_number(o.value)}" for o in outliers)
            parts.append(f"{side} outlier {shown}")
        if spread is not None and spread >= UNSTABLE_SPREAD:
            parts.append(f"{side} spread {spread:.0%}")
    return "; ".join(parts)


def _metric_lines(metrics: list[MetricDelta]) -> list[str]:
    rows = []
    for m in metrics:
        if m.significant is None and m.method == "single":
            verdict = f"can't tell (one run on a side: n={m.n_a}/{m.n_b}; add repeats)"
        elif m.significant is None:
            verdict = "n/a (missing on one side)"
        else:
            unit = f"{m.unit}, " if m.unit else ""
            said = "yes" if m.significant else "no"
            verdict = f"{said} ({_test_text(m)}; {unit}n={m.n_a}/{m.n_b})"
        delta = "-" if m.delta_pct is None else f"{m.delta_pct:+.1f}%"
        name = f"{m.metric} *" if m.decides else m.metric
        row = [name, format_number(m.median_a), format_number(m.median_b), delta, verdict]
        rows.append([*row, _repeats_text(m)])
    headers = ["metric", "median A", "median B", "delta", "significant", "repeats"]
    if not any(row[-1] for row in rows):
        rows, headers = [row[:-1] for row in rows], headers[:-1]
    table = tabulate(rows, headers=headers, disable_numparse=True)
    lines = ["  " + line for line in table.splitlines()]
    if any(m.decides for m in metrics):
        lines.append("  * decides: what the playbook cares about (expect:, else the headline)")
    if any(m.cannot_reach for m in metrics):
        lines.append(
            "  cannot reach: the exact test's smallest p at these repeats (times the Holm "
            "family) is above alpha, so no change can be called; add repeats"
        )
    if any(_repeats_text(m) for m in metrics):
        lines.append(
            f"  repeats: outliers are more than {OUTLIER_MADS:g} scaled MADs (1.4826 x MAD) and "
            f"{OUTLIER_MIN_RELATIVE:.0%} from the median (5+ repeats); spread is 1.4826 x MAD / "
            f"median, shown from {UNSTABLE_SPREAD:.0%}"
        )
    return lines


def _load_text(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def load_line(load: HostLoad) -> str:
    """The hosts' 1-minute load around each cell, one line."""
    sides = []
    for side, before, after, cpus in (
        ("A", load.a_before, load.a_after, load.cpus_a),
        ("B", load.b_before, load.b_after, load.cpus_b),
    ):
        of = f" ({cpus} CPUs)" if cpus else ""
        sides.append(f"{side} {_load_text(before)} -> {_load_text(after)}{of}")
    return f"  host load (1-minute, before the server -> after it stopped): {'; '.join(sides)}"


def unstable_line(diff: CellDiff) -> str | None:
    """'repeats unstable: ...' when a deciding metric's repeats are: no cause is named then."""
    if not diff.unstable:
        return None
    what = "; ".join(f"{m.metric}: {_repeats_text(m)}" for m in diff.unstable)
    return (
        f"repeats unstable ({what}): no likely cause is named; the sections below are what "
        "differs, not ranked causes: rerun on a quiet host (see host load under metrics)"
    )


def section_lines(section: Section) -> list[str]:
    """The whole text of a section, header first."""
    lines = [f"[{section.name}] {section.title}"]
    for entry in section.entries:
        if not entry.within_tolerance:
            lines += _entry_lines(entry)
    noise = [e.key for e in section.entries if e.within_tolerance]
    if noise:
        lines.append(f"  ({len(noise)} small changes within noise tolerance, listed in --json)")
    for block in section.blocks:
        lines.append(f"  {block.title}")
        lines += ["    " + line for line in block.lines] or ["    (none)"]
    if section.metrics:
        lines += _metric_lines(section.metrics)
    lines += ["  note: " + note for note in section.notes]
    return lines


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:150] or "cell"


def _describe(ref: CellRef) -> str:
    where = f" on {ref.host}" if ref.host else ""
    run = f" in {ref.run_id}" if ref.run_id else ""
    status = f" [{ref.status}]" if ref.status else ""
    return f"{ref.id}{where}{run}{status}"


def stack_line(stack: dict[str, list[str | None]]) -> str:
    """`serving stack: vllm 0.32.0+cpu, torch 2.13.0+cpu (same on both)`, or each change."""
    parts = []
    for name, (va, vb) in stack.items():
        parts.append(f"{name} {va or '-'}" if va == vb else f"{name} {va or '-'} -> {vb or '-'}")
    same = all(va == vb for va, vb in stack.values())
    return "serving stack: " + ", ".join(parts) + (" (same on both)" if same else "")


def _cell_diff_lines(diff: CellDiff, max_lines_inline: int, spill_dir: Path | None) -> list[str]:
    lines = [f"A: {_describe(diff.a)}", f"B: {_describe(diff.b)}"]
    if diff.paired_by == "axes":
        lines.append("(paired by axis values and host: the cell ids differ)")
    for side, ref in (("A", diff.a), ("B", diff.b)):
        if ref.status not in (None, "passed"):
            step = f" at step {ref.failed_step}" if ref.failed_step else ""
            lines.append(f"{side} {ref.status}{step}: {ref.reason or '(no reason recorded)'}")
    image = next((s for s in diff.sections if s.name == "image"), None)
    headline = image_headline(image) if image is not None else None
    if headline:  # a different image is named before anything else, as a commit is
        lines.append(headline)
    outputs = next((s for s in diff.sections if s.name == "outputs"), None)
    if outputs is not None and outputs.notes:  # wrong answers are named beside the speed
        lines.append(outputs.notes[0])
    unstable = unstable_line(diff)
    if unstable:
        lines.append(unstable)
    label = diff.a.id if diff.a.id == diff.b.id else f"{diff.a.id}--{diff.b.id}"
    shown = list(diff.differing)
    # Medians that moved within noise are still shown (that is what a person diffing two
    # cells looks at), marked as no significant change; identical medians are not. Some
    # diffs (audit's drift) have no metrics section.
    metrics = next((s for s in diff.sections if s.name == "metrics"), None)
    within_noise = (
        metrics is not None
        and not metrics.differs
        and any(m.median_a != m.median_b for m in metrics.metrics)
    )
    if within_noise and metrics is not None:
        shown.append(metrics)
    for section in shown:
        lines.append("")
        body = section_lines(section)
        if section is metrics and within_noise:
            body[0] += ": no significant change"
        if section is metrics and diff.load is not None:
            body.insert(len(body) - len(section.notes), load_line(diff.load))
        if spill_dir is not None and len(body) > max_lines_inline:
            spill_dir.mkdir(parents=True, exist_ok=True)
            path = spill_dir / f"{_safe_name(label)}.{section.name}.txt"
            path.write_text("\n".join(body) + "\n", encoding="utf-8", errors="backslashreplace")
            lines += body[:max_lines_inline]
            lines.append(f"  ... {len(body) - max_lines_inline} more lines; full section: {path}")
        else:
            lines += body
    if diff.unchanged:
        names = ", ".join(n.replace("_", " ") for n in diff.unchanged)
        if within_noise:
            names += " (no significant change)"
        lines += ["", f"no differences in: {names}"]
    if diff.stack:  # what ran, even when nothing of it changed
        lines.append(stack_line(diff.stack))
    return lines


def diff_to_dict(diff: CellDiff | RunDiff) -> dict[str, Any]:
    """The complete diff as plain data (what `--json` prints); `unstable` names the deciding
    metrics whose repeats are unstable (then no likely cause is named)."""
    data = asdict(diff)
    if isinstance(diff, CellDiff):
        data["differing"] = [s.name for s in diff.differing]
        data["unchanged"] = diff.unchanged
        data["unstable"] = [m.metric for m in diff.unstable]
    else:
        for pair, pair_data in zip(diff.pairs, data["pairs"], strict=True):
            pair_data["differing"] = [s.name for s in pair.differing]
            pair_data["unchanged"] = pair.unchanged
            pair_data["unstable"] = [m.metric for m in pair.unstable]
    return data


def _run_summary(diff: RunDiff) -> list[str]:
    lines = [f"A: {diff.a_run or '?'}    B: {diff.b_run or '?'}"]
    by_id = sum(1 for p in diff.pairs if p.paired_by == "id")
    lines.append(
        f"{len(diff.pairs)} cell pairs ({by_id} by id, {len(diff.pairs) - by_id} by axes+host); "
        f"only in A: {len(diff.only_a)}; only in B: {len(diff.only_b)}"
    )
    counts = {name: 0 for name in SECTION_TITLES}
    steady = [p for p in diff.pairs if not p.unstable]
    for pair in steady:
        for section in pair.differing:
            counts[section.name] += 1
    shown = [(n, c) for n, c in counts.items() if c]
    if shown:
        lines.append("differences, most likely cause first:")
        for name, count in shown:
            lines.append(f"  {name.replace('_', ' ')}: {count} of {len(diff.pairs)} pairs")
    shaky = [p for p in diff.pairs if p.unstable]
    if shaky:
        lines.append(
            f"repeats unstable in {len(shaky)} of {len(diff.pairs)} pairs (no cause named for "
            f"them; rerun): {', '.join(p.b.id for p in shaky)}"
        )
    differs_somewhere = {s.name for pair in diff.pairs for s in pair.differing}
    present = {s.name for pair in diff.pairs for s in pair.sections}
    unchanged = [
        n.replace("_", " ")
        for n in SECTION_TITLES
        if (n in SECTION_ORDER or n in present) and n not in differs_somewhere
    ]
    if diff.pairs and unchanged:
        lines.append(f"no differences in any pair: {', '.join(unchanged)}")
    for side, refs in (("A", diff.only_a), ("B", diff.only_b)):
        for ref in refs:
            lines.append(f"only in {side}: {_describe(ref)}")
    lines += [capacity_line(change) for change in diff.capacity]  # SLO searches, as a metric
    return lines


def render_diff(
    diff: CellDiff | RunDiff,
    fmt: Literal["text", "json"] = "text",
    *,
    max_lines_inline: int = 60,
    spill_dir: Path | None = None,
) -> str:
    """Render a diff. JSON is complete; text shows a section longer than `max_lines_inline`
    only in part, with the path of a file in `spill_dir` that holds it whole (without a
    `spill_dir`, every section is printed whole).
    """
    if fmt == "json":
        return json.dumps(diff_to_dict(diff), indent=2, default=str)
    if isinstance(diff, CellDiff):
        return "\n".join(_cell_diff_lines(diff, max_lines_inline, spill_dir)) + "\n"
    lines = _run_summary(diff)
    for pair in diff.pairs:
        lines.append("")
        lines.append("=" * 78)
        lines += _cell_diff_lines(pair, max_lines_inline, spill_dir)
    return "\n".join(lines) + "\n"
