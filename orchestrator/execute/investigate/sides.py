"""GOOD and BAD as recorded: each cell's record, its evidence, and the metric they are judged by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analyze.diff.model import deciding_metrics
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.errors import InputError
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
