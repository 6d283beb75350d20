"""`orch investigate`'s report: the verdict in one sentence first, then the evidence.

Rendered from investigation.json alone, so `orch investigate --show RUN` and the file written
into the run folder say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate


def _effect_text(effect: Mapping[str, Any] | None) -> str:
    if not effect:
        return "?"
    change = float(effect["change"])
    return f"{change:+.1%}"


def _first_bad(bisect: Mapping[str, Any]) -> str | None:
    """`<sha12> 'subject' (date)` from the commit story git printed."""
    sha = bisect.get("first_bad")
    if not sha:
        return None
    story = str(bisect.get("story") or "").splitlines()
    date = next((ln.split(":", 1)[1].strip() for ln in story if ln.startswith("AuthorDate:")), "")
    subject = next((ln.strip() for ln in story if ln.startswith("    ") and ln.strip()), "")
    said = f"commit {str(sha)[:12]}"
    if subject:
        said += f" '{subject}'"
    return said + (f" ({date})" if date else "")


def _value(value: Any) -> str:
    return "(not set)" if value is None else str(value)


def verdict_sentence(doc: Mapping[str, Any]) -> str:
    """The answer in one sentence: the cause found, what was ruled out, what could not be."""
    repro = doc.get("reproduction") or {}
    if repro.get("outcome") != "reproduces":
        return str(repro.get("line", "no verdict"))
    experiments: Sequence[Mapping[str, Any]] = doc.get("experiments") or []
    explains = [e for e in experiments if e["verdict"] == "explains"]
    partly = [e for e in experiments if e["verdict"] == "partly"]
    ruled = [e for e in experiments if e["verdict"] == "ruled_out"]
    open_ = [e for e in experiments if e["verdict"] == "inconclusive"]
    parts = []
    bisect = doc.get("bisect") or {}
    first = _first_bad(bisect)
    for e in explains:
        name = str(e["label"]).split(":")[0]
        if name == "commit" and first:
            parts.append(
                f"the change is {first} (BAD with GOOD's commit: {_effect_text(e['effect'])})"
            )
        else:
            parts.append(f"the change follows {e['label']} ({_effect_text(e['effect'])})")
    if not explains:
        parts.append("no declared factor alone explains the change")
    if partly:
        parts.append(
            "partly: " + ", ".join(f"{e['label']} ({_effect_text(e['effect'])})" for e in partly)
        )
    if ruled:
        parts.append("ruled out: " + ", ".join(str(e["label"]).split(":")[0] for e in ruled))
    if open_:
        # neither shown nor ruled out: still a suspect, never silently dropped
        parts.append(
            "inconclusive (not ruled out): "
            + ", ".join(str(e["label"]).split(":")[0] for e in open_)
        )
    if doc.get("phase_grown"):
        parts.append(f"grown: {doc['phase_grown']}")
    facts = doc.get("host_facts") or []
    if facts:
        parts.append(f"{len(facts)} host difference(s) listed, not testable by swapping")
    return "; ".join(parts)


def unit_sentence(unit: Mapping[str, Any]) -> str:
    """What the experiments took as their unit of replication (investigation.json's
    `start_unit`), in a sentence."""
    starts, sd = int(unit.get("starts") or 1), unit.get("start_sd")
    if starts > 1:
        return (
            f"Unit: the server start ({starts} starts a cell; each start's mean one "
            "observation, the start-to-start spread measured)."
        )
    if isinstance(sd, int | float):
        return (
            f"Unit: one server start a cell, a start-to-start sd of {sd:.1%} "
            f"({unit.get('source')}) added to each side."
        )
    return (
        "Unit: one server start a cell; start-to-start spread not measured, the verdicts "
        "assume it small."
    )


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The whole report as Markdown (readable as plain text on a terminal)."""
    metric = doc.get("metric")
    lines = [
        f"# orch investigate: {metric}",
        "",
        f"**{verdict_sentence(doc)}**",
        "",
        f"GOOD `{doc.get('good')}`, BAD `{doc.get('bad')}`, measured on `{doc.get('host')}`, "
        f"tolerance {float(doc.get('tolerance') or 0):.0%}.",
        "",
        "## Is it real, and is it still there?",
        "",
        str((doc.get("reproduction") or {}).get("line", "")),
    ]
    if doc.get("phase_grown"):
        lines += ["", f"The phase that grew (GOOD now -> BAD now, profiled): {doc['phase_grown']}"]
    changed = doc.get("changed") or []
    if changed:
        lines += ["", "What differs from the record:", ""] + [f"- {c}" for c in changed]
    factors = doc.get("factors") or []
    lines += ["", "## Factors", ""]
    if factors:
        rows = [
            [
                f["label"],
                _value(f.get("good")),
                _value(f.get("bad")),
                "yes" if f.get("testable") else f"no: {f.get('why_not')}",
            ]
            for f in factors
        ]
        lines.append(
            tabulate(rows, headers=["factor", "GOOD", "BAD", "testable"], tablefmt="github")
        )
    else:
        lines.append("GOOD and BAD declare the same cell: nothing to swap.")
    facts = doc.get("host_facts") or []
    if facts:
        lines += ["", "Not testable by swapping (host facts, GOOD -> BAD):", ""]
        lines += [f"- {f}" for f in facts]
    experiments = doc.get("experiments") or []
    cells = doc.get("cells") or {}
    if experiments:
        lines += ["", "## Controlled experiments (BAD with one factor set back to GOOD's)", ""]
        rows = []
        for e in experiments:
            ref = cells.get(e["label"]) or {}
            rows.append(
                [
                    e["label"],
                    e["verdict"].replace("_", " "),
                    e.get("measured") or "-",
                    f"[{ref.get('id')}]({ref.get('path')})" if ref else "-",
                ]
            )
        lines.append(
            tabulate(
                rows,
                headers=["experiment", "verdict", "effect on BAD", "bundle"],
                tablefmt="github",
            )
        )
        lines += ["", unit_sentence(doc.get("start_unit") or {})]
    not_tested = doc.get("not_tested") or []
    if not_tested:
        lines += ["", "Not tested (over the budget): " + ", ".join(not_tested)]
    bisect = doc.get("bisect")
    if bisect:
        lines += ["", "## Bisect", "", str(bisect.get("message") or "")]
        if bisect.get("run"):
            lines.append(f"(bundle: `{bisect['run']}`, {bisect.get('cell_runs')} cell runs)")
        if bisect.get("story"):
            lines += ["", "```", str(bisect["story"]).rstrip(), "```"]
    for note in doc.get("notes") or []:
        lines += ["", f"Note: {note}"]
    lines += ["", f"Cells run: {doc.get('spent_cells', 0)} (run `{doc.get('run')}`)."]
    return "\n".join(lines) + "\n"
