"""`orch diff`: what changed between two cells (or two runs), most likely causes first.

Sections, in order: code, packages, environment (as the server processes saw it), server flags,
system, hardware state, then metrics with deltas and significance (the playbook's deciding
metrics first, Holm-corrected p-values, outlying repeats and host load beside them; when the
deciding metrics' repeats are unstable no likely cause is named). A section is shown only when
something in it differs (metrics: a significant change, or measured on one side only; medians
that moved within noise are shown, marked "no significant change"); the rest are named in one
"no differences in" line. The snapshot sections are `analyze/diff/host.py`'s; nothing is cut
when printed: `analyze/diff/render.py` writes a long section whole to a file and prints its path.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from orchestrator.analyze.diff.code import code_section
from orchestrator.analyze.diff.host import (
    hardware_section,
    packages_section,
    serving_stack,
    system_section,
)
from orchestrator.analyze.diff.image import container_of, image_section
from orchestrator.analyze.diff.model import (
    MISSING,
    ONE_START,
    REPEATS_NOTE,
    SECTION_TITLES,
    STARTS_NOTE,
    UNSET,
    CellDiff,
    CellRef,
    Entry,
    HostLoad,
    MetricDelta,
    RunDiff,
    Section,
    as_dict,
    correct,
    deciding_metrics,
    dict_entries,
    metric_deltas,
    same,
)
from orchestrator.analyze.diff.node_parts import node_label, paired_nodes
from orchestrator.analyze.diff.outputs import outputs_section
from orchestrator.analyze.diff.profile import profile_section
from orchestrator.analyze.evidence import CellEvidence, load_cells
from orchestrator.analyze.replication import NOT_MEASURED, start_spread, values_and_starts
from orchestrator.analyze.slo import capacity_changes
from orchestrator.cell import canonical_json
from orchestrator.errors import InputError
from orchestrator.results.documents import is_cell_dir
from orchestrator.results.layout import CELLS_DIR
from orchestrator.results.records import NOT_RESET, Snapshot, cache_state
from orchestrator.results.show import absent_lines
from orchestrator.runner.probe.shape import CPU_COUNT, LOAD_1M

# --- environment -------------------------------------------------------------------------------


def _observed(env_check: Mapping[str, Any]) -> dict[str, list[str | None]]:
    """Per variable: the value each checked server process saw (None where it was unset)."""
    out: dict[str, list[str | None]] = {}
    processes = env_check.get("processes")
    if not isinstance(processes, list):
        return out
    for proc in processes:
        for name, check in as_dict(as_dict(proc).get("vars")).items():
            observed = check.get("observed") if isinstance(check, dict) else check
            out.setdefault(name, []).append(None if observed is None else str(observed))
    return out


def _observed_summary(values: Sequence[str | None]) -> str:
    counts: dict[str, int] = {}
    for value in values:
        label = UNSET if value is None else value
        counts[label] = counts.get(label, 0) + 1
    n = len(values)
    if len(counts) == 1:
        (label,) = counts
        return f"{label} (all {n} processes)" if n > 1 else label
    return "; ".join(f"{label} in {c} of {n} processes" for label, c in counts.items())


def _env_check_state(env_check: Mapping[str, Any]) -> str | None:
    if not env_check:
        return None
    mismatches = env_check.get("mismatches")
    count = len(mismatches) if isinstance(mismatches, list) else 0
    ok = env_check.get("ok")
    state = "ok" if ok else f"failed ({count} mismatches)" if ok is False else "unknown"
    return f"{state}, mode {env_check.get('mode', '?')}"


def _environment_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("environment", SECTION_TITLES["environment"])
    obs_a, obs_b = _observed(a.env_check), _observed(b.env_check)
    for name in list(obs_a) + [n for n in obs_b if n not in obs_a]:
        va, vb = obs_a.get(name), obs_b.get(name)
        set_a = None if va is None else sorted({UNSET if v is None else v for v in va})
        set_b = None if vb is None else sorted({UNSET if v is None else v for v in vb})
        if set_a == set_b:
            continue
        note = None
        seen_in_a = va is not None and any(v is not None for v in va)
        if seen_in_a and vb is not None and any(v is None for v in vb):
            note = "set in A's server, missing in B's processes"
        section.entries.append(
            Entry(
                f"{name} (observed in server processes)",
                "not checked" if va is None else _observed_summary(va),
                "not checked" if vb is None else _observed_summary(vb),
                note,
            )
        )
    state_a, state_b = _env_check_state(a.env_check), _env_check_state(b.env_check)
    if state_a != state_b:
        section.entries.append(Entry("env check", state_a, state_b))
    declared_a = as_dict(a.cell.get("env")) or as_dict(a.server.get("env_declared"))
    declared_b = as_dict(b.cell.get("env")) or as_dict(b.server.get("env_declared"))
    section.entries += dict_entries(declared_a, declared_b, key_format="{} (declared)")
    host_a, host_b = a.pre.env, b.pre.env
    section.entries += dict_entries(host_a, host_b, key_format="{} (host, as the probe saw it)")
    return section


# --- server flags ------------------------------------------------------------------------------

# the runner's own cell directory on the host, `<workdir>/runs/<run id>/.<cell id>.partial`, or
# a server session's folder, `<workdir>/runs/<run id>/.<first cell id>.server`: a server started
# there (no repo, no cwd given) has a cwd that differs in every run and every session
_CELL_DIR_ON_HOST = re.compile(r"/runs/[^/]+/\.[^/]+\.(?:partial|server)(?=/|$)")


def _run_neutral_path(value: Any) -> Any:
    """A path with the run's own cell directory replaced by a placeholder (other values as is)."""
    if isinstance(value, str):
        return _CELL_DIR_ON_HOST.sub("/runs/<run>/<cell directory>", value)
    return value


# A seed the server draws itself when the playbook gives none (SGLang draws `random_seed` at
# every start): two starts differ in it by chance, so it is noise, not a cause.
_DRAWN_BY_SERVER = frozenset({"random_seed", "seed"})
_SEED_FLAGS = ("random-seed", "random_seed", "seed")


def _server_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("server_flags", SECTION_TITLES["server_flags"])
    spec_a, spec_b = as_dict(a.cell.get("server")), as_dict(b.cell.get("server"))
    args_a, args_b = as_dict(spec_a.get("args")), as_dict(spec_b.get("args"))
    section.entries += dict_entries(args_a, args_b, key_format="--{}")
    for key in ("adapter",):
        if not same(spec_a.get(key), spec_b.get(key)):
            section.entries.append(Entry(key, spec_a.get(key), spec_b.get(key)))
    argv_a = a.server.get("argv") or spec_a.get("argv")
    argv_b = b.server.get("argv") or spec_b.get("argv")
    if not same(argv_a, argv_b):
        section.entries.append(
            Entry(
                "argv",
                shlex.join(str(x) for x in argv_a) if isinstance(argv_a, list) else argv_a,
                shlex.join(str(x) for x in argv_b) if isinstance(argv_b, list) else argv_b,
            )
        )
    declared_seed = any(k in args for args in (args_a, args_b) for k in _SEED_FLAGS)
    cwd_a, cwd_b = a.server.get("cwd"), b.server.get("cwd")
    if not same(_run_neutral_path(cwd_a), _run_neutral_path(cwd_b)):
        section.entries.append(Entry("cwd", cwd_a, cwd_b))
    # a refused reset leaves the previous cell's warm cache: a likely cause of faster numbers
    cache_a, cache_b = cache_state(a.cell_json), cache_state(b.cell_json)
    if cache_a != cache_b and NOT_RESET in f"{cache_a} {cache_b}":
        section.entries.append(Entry("cache before the bench", cache_a, cache_b))
    # what the server itself reports (e.g. SGLang's server_info): its effective arguments
    for name in sorted(k for k in {*a.captures, *b.captures} if k.endswith(".ready")):
        doc_a, doc_b = as_dict(a.captures.get(name)), as_dict(b.captures.get(name))
        scalars_a = {k: v for k, v in doc_a.items() if not isinstance(v, dict | list)}
        scalars_b = {k: v for k, v in doc_b.items() if not isinstance(v, dict | list)}
        capture = name.removesuffix(".ready")
        reported = dict_entries(
            scalars_a, scalars_b, key_format=f"{{}} (reported by the server, {capture})"
        )
        for entry in reported:
            if entry.key.split(" ", 1)[0] in _DRAWN_BY_SERVER and not declared_seed:
                entry.within_tolerance = True
                entry.note = "drawn by the server, not set in the playbook: noise, not a cause"
        section.entries += reported
    return section


def _bench_section(a: CellEvidence, b: CellEvidence) -> Section:
    """The benchmark itself: prompts, lengths, concurrency, warmups and repeats move metrics
    without any cause on the server side."""
    section = Section("bench", SECTION_TITLES["bench"])
    spec_a, spec_b = as_dict(a.cell.get("bench")), as_dict(b.cell.get("bench"))
    args_a, args_b = as_dict(spec_a.get("args")), as_dict(spec_b.get("args"))
    section.entries += dict_entries(args_a, args_b, key_format="--{}")
    for key in ("adapter", "warmup", "repeats", "timeout", "metrics"):
        if not same(spec_a.get(key), spec_b.get(key)):
            section.entries.append(Entry(key, spec_a.get(key), spec_b.get(key)))
    argv_a, argv_b = spec_a.get("argv"), spec_b.get("argv")
    # The argv repeats the args; shown only when it differs some other way (a command bench).
    if not section.entries and not same(argv_a, argv_b):
        section.entries.append(
            Entry(
                "argv",
                shlex.join(str(x) for x in argv_a) if isinstance(argv_a, list) else argv_a,
                shlex.join(str(x) for x in argv_b) if isinstance(argv_b, list) else argv_b,
            )
        )
    return section


# --- metrics -----------------------------------------------------------------------------------


def _metrics_section(
    a: CellEvidence, b: CellEvidence, deciding: list[str], ratio_threshold: float, alpha: float
) -> Section:
    section = Section("metrics", SECTION_TITLES["metrics"])
    section.metrics = metric_deltas(a, b, deciding, ratio_threshold=ratio_threshold, alpha=alpha)
    section.notes += unit_notes(section.metrics, a.metrics, b.metrics)
    for side, cell in (("A", a), ("B", b)):  # an engine family one side lacks: said, not zero
        block = as_dict(as_dict(cell.metrics).get("engine_metrics"))
        section.notes += [f"{side}: {line}" for line in absent_lines(block)]
    return section


def _spread(metrics: Mapping[str, Any], metric: str) -> str:
    """A side's spread between and within its starts, from its values (as metrics.json's
    `starts` record has it, recomputed so a record without it still shows it)."""
    values, ids = values_and_starts(metrics, metric)
    return start_spread(values, ids).text() if len(values) > 1 else NOT_MEASURED


def unit_notes(
    deltas: Sequence[MetricDelta], a: Mapping[str, Any], b: Mapping[str, Any]
) -> list[str]:
    """What the tests counted, said once under the table: start means where a side ran
    several server starts (with each side's recorded spread of the first deciding metric so
    judged), repeats of one start where each side ran one (their spread not measured)."""
    notes: list[str] = []
    by_starts = [m for m in deltas if m.unit not in (None, ONE_START)]
    if by_starts:
        notes.append(STARTS_NOTE)
        shown = next((m for m in by_starts if m.decides), by_starts[0])
        notes.append(
            f"{shown.metric} start-to-start spread: A {_spread(a, shown.metric)}; "
            f"B {_spread(b, shown.metric)}"
        )
    if any(m.unit == ONE_START for m in deltas):
        notes.append(REPEATS_NOTE)
    return notes


def _load(snapshot: Snapshot) -> float | None:
    value = snapshot.value(LOAD_1M)
    return float(value) if isinstance(value, int | float) else None


def _cpus(snapshot: Snapshot) -> int | None:
    value = snapshot.value(CPU_COUNT)
    return value if isinstance(value, int) else None


def host_load(a: CellEvidence, b: CellEvidence) -> HostLoad | None:
    """Each cell's 1-minute load before and after, from its snapshots; None when none has it."""
    load = HostLoad(
        _load(a.pre), _load(a.post), _load(b.pre), _load(b.post), _cpus(a.pre), _cpus(b.pre)
    )
    readings = (load.a_before, load.a_after, load.b_before, load.b_after)
    return load if any(r is not None for r in readings) else None


# --- public API --------------------------------------------------------------------------------


def diff_cells(
    a: CellEvidence,
    b: CellEvidence,
    *,
    repo_path: Path | None = None,
    ratio_threshold: float = 0.05,
    alpha: float = 0.05,
    paired_by: Literal["id", "axes", "given"] = "given",
) -> CellDiff:
    """Compare two cells section by section, most likely cause of a change first.

    `repo_path`: a git clone holding both commits, for the commit log and stat; by default the
    cells' repo dest on this machine, then their repo URL when it is a local path, are tried.
    Metrics: the deciding ones (`deciding_metrics`) first, p-values Holm-corrected
    (`metric_deltas`); the cells' host load beside them.
    """
    deciding, deciding_from = deciding_metrics(a, b)
    nodes = _node_sections(a, b)
    sections = [
        *([image_section(a, b)] if container_of(a) or container_of(b) else []),  # images first
        code_section(a, b, repo_path),
        packages_section(a, b),
        _environment_section(a, b),
        *nodes["environment"],
        _server_section(a, b),
        _bench_section(a, b),
        system_section(a, b),
        *nodes["system"],
        hardware_section(a, b),
        *nodes["hardware"],
        *([profile_section(a, b)] if a.profile or b.profile else []),  # only with `profile:`
        *([outputs_section(a, b)] if a.outputs or b.outputs else []),  # beside the speed
        _metrics_section(a, b, deciding, ratio_threshold, alpha),
    ]
    return CellDiff(
        CellRef.of(a),
        CellRef.of(b),
        paired_by,
        sections,
        deciding=deciding,
        deciding_from=deciding_from,
        load=host_load(a, b),
        stack=serving_stack(a, b),
    )


def _node_sections(a: CellEvidence, b: CellEvidence) -> dict[str, list[Section]]:
    """The environment, system and hardware of two multi-node cells, node by node."""
    out: dict[str, list[Section]] = {"environment": [], "system": [], "hardware": []}
    for rank, na, nb in paired_nodes(a, b):
        label = node_label(rank, na, nb)
        if na is None or nb is None:
            section = Section("environment", f"{SECTION_TITLES['environment']}, {label}")
            section.entries.append(
                Entry("node", "present" if na else MISSING, "present" if nb else MISSING)
            )
            out["environment"].append(section)
            continue
        for name, make in (
            ("environment", _environment_section),
            ("system", system_section),
            ("hardware", hardware_section),
        ):
            section = make(na, nb)
            section.title = f"{section.title}, {label}"
            out[name].append(section)
    return out


def _pair_key(cell: CellEvidence) -> str:
    return canonical_json([cell.axes, cell.host])


def diff_runs(
    a_cells: Sequence[CellEvidence],
    b_cells: Sequence[CellEvidence],
    *,
    repo_path: Path | None = None,
    ratio_threshold: float = 0.05,
    alpha: float = 0.05,
) -> RunDiff:
    """Pair cells by id, then the rest by (axes, host), and diff each pair; list the unpaired.

    The metric p-values are Holm-corrected across every pair, not per cell (`correct`): a run
    of 50 cells asks "did anything change?" 50 times, and its chance of one false alarm among
    them stays below `alpha` (one family for the deciding metrics, one for the others)."""
    pairs: list[tuple[CellEvidence, CellEvidence, Literal["id", "axes"]]] = []
    b_by_id = {c.id: c for c in b_cells}
    rest_a: list[CellEvidence] = []
    used_b: set[int] = set()
    for cell in a_cells:
        match = b_by_id.get(cell.id)
        if match is not None and id(match) not in used_b:
            pairs.append((cell, match, "id"))
            used_b.add(id(match))
        else:
            rest_a.append(cell)
    rest_b = [c for c in b_cells if id(c) not in used_b]
    b_by_axes: dict[str, list[CellEvidence]] = {}
    for cell in rest_b:
        b_by_axes.setdefault(_pair_key(cell), []).append(cell)
    only_a: list[CellEvidence] = []
    for cell in rest_a:
        candidates = b_by_axes.get(_pair_key(cell))
        if candidates:
            match = candidates.pop(0)
            pairs.append((cell, match, "axes"))
            used_b.add(id(match))
        else:
            only_a.append(cell)
    only_b = [c for c in b_cells if id(c) not in used_b]
    diffs = [
        diff_cells(
            x, y, repo_path=repo_path, ratio_threshold=ratio_threshold, alpha=alpha, paired_by=how
        )
        for x, y, how in pairs
    ]
    correct([m for d in diffs for m in d.section("metrics").metrics], alpha)
    return RunDiff(
        a_run=a_cells[0].run_id if a_cells else None,
        b_run=b_cells[0].run_id if b_cells else None,
        pairs=diffs,
        only_a=[CellRef.of(c) for c in only_a],
        only_b=[CellRef.of(c) for c in only_b],
        capacity=capacity_changes(a_cells, b_cells),
    )


def _is_cell_dir(path: Path) -> bool:
    return is_cell_dir(path) and not (path / CELLS_DIR).is_dir()


def diff_paths(
    a: Path,
    b: Path,
    *,
    repo_path: Path | None = None,
    ratio_threshold: float = 0.05,
    alpha: float = 0.05,
) -> CellDiff | RunDiff:
    """`orch diff A B` on two directories: two cells (`diff_cells`) or two runs (`diff_runs`).

    A cell against a run is refused (InputError): pairing one cell with a run's cells would
    report every other cell as missing and hide which comparison was meant.
    """
    a_cell, b_cell = _is_cell_dir(Path(a)), _is_cell_dir(Path(b))
    if a_cell != b_cell:
        cell, run = (a, b) if a_cell else (b, a)
        raise InputError(
            f"cannot diff a cell with a run: {cell} is one cell, {run} is a run",
            hint=f"compare two cells (e.g. {run}/cells/{Path(cell).name}) or two runs",
        )
    ca, cb = load_cells(Path(a)), load_cells(Path(b))
    if a_cell:
        return diff_cells(
            ca[0], cb[0], repo_path=repo_path, ratio_threshold=ratio_threshold, alpha=alpha
        )
    return diff_runs(ca, cb, repo_path=repo_path, ratio_threshold=ratio_threshold, alpha=alpha)
