"""GOOD and BAD as recorded: each cell's record, its evidence, and the metric they are judged by."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analyze.diff.model import deciding_metrics
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.investigate.factors import Factor
from orchestrator.analyze.investigate.verdicts import reproduction
from orchestrator.errors import InputError
from orchestrator.execute.replay import made_here
from orchestrator.results.read import RunBundle, open_cell, run_of
from orchestrator.results.records import CellRecord


@dataclass
class Side:
    """GOOD or BAD as recorded: the record, its evidence and its samples of the metric."""

    record: CellRecord
    evidence: CellEvidence
    run: RunBundle
    values: list[float] = field(default_factory=list)


def open_side(ref: str, results_dir: Path, what: str) -> Side:
    """GOOD or BAD (`what`) from RUN/CELL or a cell folder inside a run."""
    record = open_cell(ref, results_dir)
    run = run_of(record)
    if run is None or not record.cell:
        raise InputError(f"{what} {ref}: not a cell inside a run bundle", hint="pass RUN/CELL")
    return Side(record, CellEvidence.load(record.path), run)


def deciding_metric(good: CellEvidence, bad: CellEvidence) -> str:
    """The metric an investigation judges by: the cells' first deciding metric."""
    deciding, _ = deciding_metrics(good, bad)
    if not deciding:
        raise InputError("GOOD and BAD report no metric in common", hint="pass --metric")
    return deciding[0]


# The parts of a cell whose adapter decides what every flag, setting and output means.
ADAPTER_SECTIONS = ("server", "bench")


@dataclass(frozen=True)
class AdapterChange:
    """GOOD and BAD run under different adapters (another engine, another bench client)."""

    section: str  # "server" or "bench"
    good: str | None
    bad: str | None

    @property
    def label(self) -> str:
        """`server adapter: sglang (GOOD) vs vllm (BAD)`."""
        good, bad = self.good or "(none)", self.bad or "(none)"
        return f"{self.section} adapter: {good} (GOOD) vs {bad} (BAD)"


def adapter_changes(good: Mapping[str, Any], bad: Mapping[str, Any]) -> list[AdapterChange]:
    """The sections whose adapter differs between two recorded cells, server first."""
    out = []
    for section in ADAPTER_SECTIONS:
        g, b = good.get(section), bad.get(section)
        g_name = g.get("adapter") if isinstance(g, Mapping) else None
        b_name = b.get("adapter") if isinstance(b, Mapping) else None
        if g_name != b_name:
            out.append(AdapterChange(section, g_name, b_name))
    return out


def refuse_adapter_change(good: Side, bad: Side) -> None:
    """Investigation swaps one declared value at a time inside BAD's cell; across adapters no
    such swap means anything (a flag of one engine set on another), so it is refused."""
    changes = adapter_changes(good.record.cell, bad.record.cell)
    if not changes:
        return
    first = changes[0]
    raise InputError(
        f"GOOD ({good.record.path}) and BAD ({bad.record.path}) run different "
        f"{first.section} adapters: {first.good} vs {first.bad}; no single difference can be "
        "set back across engines",
        key_path=f"{first.section}.adapter",
        hint="compare them with `orch diff GOOD BAD`; investigate two cells of one adapter",
    )


def own_value(cell: Mapping[str, Any], kind: str, name: str) -> tuple[Any, bool]:
    """A side's own value of a server flag or bench setting: its args' value, else what its
    recorded argv passes (an adapter's default, e.g. sglang.bench_serving's `--backend
    sglang`); and whether it was read from the argv. (None, False): the side has none."""
    section = cell.get("server" if kind == "server_flag" else "bench")
    if not isinstance(section, Mapping):
        return None, False
    args = section.get("args")
    if isinstance(args, Mapping) and args.get(name) is not None:
        return args[name], False
    argv = [str(a) for a in section.get("argv") or []]
    for i, token in enumerate(argv):
        if token == f"--{name}":
            following = argv[i + 1] if i + 1 < len(argv) else None
            if following is None or following.startswith("--"):
                return True, True
            return following, True
        if token.startswith(f"--{name}="):
            return token.split("=", 1)[1], True
    return None, False


def failure_line(side: Side, what: str) -> str | None:
    """`BAD failed at bench (reason): ...` when the recorded cell did not pass, else None."""
    status = side.record.status
    if status in (None, "passed"):
        return None
    where = f" at {side.record.failed_step}" if side.record.failed_step else ""
    why = f": {side.record.reason}" if side.record.reason else ""
    return (
        f"{what} {status}{where}{why}; its {len(side.values)} value(s) are what it measured "
        "before that, and measuring it again may fail the same way"
    )


def shown_value(cell: Mapping[str, Any], factor: Factor, declared: Any) -> str:
    """A side's value of `factor` as that side ran it: its declared value, else what its own
    argv passes (an adapter's default, said as such)."""
    if declared is None and factor.kind in ("server_flag", "bench_setting"):
        value, from_argv = own_value(cell, factor.kind, factor.name)
        if from_argv:
            return f"{factor.shown(value)} (in its argv, not declared)"
    return factor.shown(declared)


def plan_notes(good: Side, bad: Side, tolerance: float) -> list[str]:
    """What the plan must say before its experiments: a side that failed, bundles made on
    another machine (a run needs --yes), a recorded change already within --tolerance."""
    lines = []
    for side, what in ((good, "GOOD"), (bad, "BAD")):
        failed = failure_line(side, what)
        if failed:
            lines.append(f"note: {failed}")
    foreign = [w for s, w in ((good, "GOOD"), (bad, "BAD")) if not made_here(s.run)]
    if foreign:
        verb = "come" if len(foreign) > 1 else "comes"
        lines.append(
            f"note: {' and '.join(foreign)} {verb} from a bundle made on another machine (or "
            "one that does not say where): running needs --yes, which shows the commands"
        )
    recorded = reproduction(good.values, bad.values, None, None, tolerance=tolerance)
    change = recorded.recorded.change
    if recorded.outcome == "not_significant":
        why = (
            f"already within --tolerance {100 * tolerance:g}%"
            if abs(change) <= tolerance
            else "not significant beyond the noise"
        )
        lines.append(
            f"note: the recorded change, {100 * change:+.1f}%, is {why}: investigate stops "
            "there and runs nothing (a smaller --tolerance looks closer)"
        )
    elif recorded.outcome == "unsettled":
        lines.append(
            f"note: the recorded change, {100 * change:+.1f}%, rests on too few repeats to be "
            f"judged ({recorded.recorded.n_a} v {recorded.recorded.n_b}): GOOD and BAD are "
            "measured again first, and judged on that"
        )
    return lines


def factor_lines(
    good_cell: Mapping[str, Any], bad_cell: Mapping[str, Any], factors: Sequence[Factor]
) -> list[str]:
    """The plan's factors, an adapter difference first (then nothing is testable, and the
    experiments line says none will run), each side's value as that side ran it."""
    adapters = adapter_changes(good_cell, bad_cell)
    lines = ["factors (declared differences):"]
    for a in adapters:
        lines.append(f"  {a.label}, not swappable: another engine or client")
    for f in factors:
        if adapters:
            how = f"not testable: the {adapters[0].section} adapters differ"
        else:
            how = "testable" if f.testable else f"not testable: {f.why_not}"
        lines.append(
            f"  {f.label}: {shown_value(good_cell, f, f.good)} (GOOD) vs "
            f"{shown_value(bad_cell, f, f.bad)} (BAD), {how}"
        )
    if not factors and not adapters:
        lines.append("  none: GOOD and BAD declare the same cell")
    if adapters:
        a = adapters[0]
        lines.append(
            f"experiments: none: GOOD and BAD run different {a.section} adapters ({a.good} "
            f"vs {a.bad}), and investigate refuses to run them (compare with `orch diff`)"
        )
    return lines
