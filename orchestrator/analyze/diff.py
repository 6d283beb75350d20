"""`orch diff`: what changed between two cells (or two runs), most likely causes first.

Sections, in order: code, packages, environment (as the server processes saw it), server flags,
system, hardware state, then metrics with deltas and significance. A section is shown only when
something in it differs (metrics: a significant change, or measured on one side only; medians
that moved within noise are shown, marked "no significant change"); the rest are named in one
"no differences in" line. Nothing is cut:
`render_diff` writes a long section whole to a file and prints its path.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tabulate import tabulate

from orchestrator.analyze.evidence import CellEvidence, load_cells
from orchestrator.analyze.metrics import format_number
from orchestrator.analyze.stats import compare, median
from orchestrator.errors import InputError
from orchestrator.plan.cell import canonical_json
from orchestrator.results.documents import is_cell_dir
from orchestrator.results.layout import CELLS_DIR
from orchestrator.results.records import Snapshot
from orchestrator.runner import probe_shape as shape

SECTION_TITLES: dict[str, str] = {
    "code": "code (repo ref, commit, tree state)",
    "packages": "packages (pip freeze)",
    "environment": "environment (as the server processes saw it)",
    "server_flags": "server flags",
    "bench": "bench settings (what was measured)",
    "system": "system (driver, CUDA, NCCL, torch, kernel, python)",
    "hardware": "hardware state (before the server started; 'after run' where marked)",
    "metrics": "metrics",
}
SECTION_ORDER: tuple[str, ...] = tuple(SECTION_TITLES)

MISSING = "<missing>"
UNSET = "<unset>"


@dataclass
class Entry:
    """One value that differs: `a` and `b` are None when absent on that side."""

    key: str
    a: Any
    b: Any
    note: str | None = None
    within_tolerance: bool = False  # noise-level change (temperature, power draw): JSON only


@dataclass
class Block:
    """Whole text that belongs to a section, e.g. the commits between two SHAs."""

    title: str
    lines: list[str]


@dataclass
class MetricDelta:
    """One metric on both sides: medians, relative change and whether it is significant."""

    metric: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    delta_pct: float | None
    significant: bool | None
    method: str | None
    p_value: float | None


@dataclass
class Section:
    """One aspect of the two cells; `differs` says whether it has anything to show."""

    name: str
    title: str
    entries: list[Entry] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: list[MetricDelta] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """True when a real (not noise-level) difference, a block or a metric change is present.

        A metric counts only when its change is significant or it was measured on one side
        only: repeats of the same cell always differ a little, and that is not a difference.
        """
        return (
            any(not e.within_tolerance for e in self.entries)
            or bool(self.blocks)
            or any(m.significant is not False for m in self.metrics)
        )


@dataclass
class CellRef:
    """Which cell a side of a diff is."""

    id: str
    host: str | None
    run_id: str | None
    status: str | None
    reason: str | None
    failed_step: str | None
    path: str
    axes: dict[str, Any]

    @classmethod
    def of(cls, cell: CellEvidence) -> CellRef:
        """The reference of a loaded cell."""
        return cls(
            id=cell.id,
            host=cell.host,
            run_id=cell.run_id,
            status=cell.status,
            reason=cell.reason,
            failed_step=cell.failed_step,
            path=str(cell.path),
            axes=cell.axes,
        )


@dataclass
class CellDiff:
    """Two cells compared section by section, sections in SECTION_ORDER."""

    a: CellRef
    b: CellRef
    paired_by: Literal["id", "axes", "given"]
    sections: list[Section]

    @property
    def differing(self) -> list[Section]:
        """Sections with something to show, most likely cause first."""
        return [s for s in self.sections if s.differs]

    @property
    def unchanged(self) -> list[str]:
        """Names of the sections with no difference."""
        return [s.name for s in self.sections if not s.differs]

    def section(self, name: str) -> Section:
        """The section called `name`."""
        return next(s for s in self.sections if s.name == name)


@dataclass
class RunDiff:
    """Two sets of cells paired by id (else by axes and host), plus the unpaired ones."""

    a_run: str | None
    b_run: str | None
    pairs: list[CellDiff]
    only_a: list[CellRef]
    only_b: list[CellRef]


# --- small helpers -----------------------------------------------------------------------------


def _text(value: Any) -> str:
    """A value as one display string; None shows as <missing>."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value) if value else "(none)"
    if isinstance(value, dict):
        return canonical_json(value)
    return str(value)


def _same(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def _dict_entries(
    a: Mapping[str, Any], b: Mapping[str, Any], *, key_format: str = "{}"
) -> list[Entry]:
    """Entries for keys whose values differ between two mappings (A's key order, then B's)."""
    entries: list[Entry] = []
    for key in list(a) + [k for k in b if k not in a]:
        va, vb = a.get(key), b.get(key)
        if not _same(va, vb):
            note = "only in B" if key not in a else "only in A" if key not in b else None
            entries.append(Entry(key_format.format(key), va, vb, note))
    return entries


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --- code --------------------------------------------------------------------------------------

_REPO_FIELDS = ("requested", "sha", "describe", "dirty", "dirty_action", "status_porcelain")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "core.quotepath=off", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GIT_PAGER": "cat", "LC_ALL": "C"},
        timeout=120,
    )


def _repo_candidates(a: CellEvidence, b: CellEvidence) -> list[Path]:
    """Where the repo may be on this machine: each cell's dest, then a local-path URL."""
    out: list[Path] = []
    for cell in (a, b):
        pin = _as_dict(cell.cell.get("repo"))
        dest = pin.get("dest")
        if isinstance(dest, str) and dest:
            path = Path(dest).expanduser()
            out.append(path if path.is_absolute() else Path.home() / path)
    for cell in (a, b):
        url = _as_dict(cell.cell.get("repo")).get("url")
        if isinstance(url, str) and url:
            local = url.removeprefix("file://")
            if local.startswith(("/", "~", ".")):
                out.append(Path(local).expanduser())
    unique: list[Path] = []
    for path in out:
        if path not in unique:
            unique.append(path)
    return unique


def _has_commits(repo: Path, shas: Iterable[str]) -> bool:
    if not repo.exists():
        return False
    try:
        if _git(repo, "rev-parse", "--git-dir").returncode != 0:
            return False
        return all(_git(repo, "cat-file", "-e", f"{s}^{{commit}}").returncode == 0 for s in shas)
    except (OSError, subprocess.SubprocessError):
        return False


def _git_lines(repo: Path, *args: str) -> list[str]:
    result = _git(repo, *args)
    if result.returncode != 0:
        return [f"(git {' '.join(args)} failed: {result.stderr.strip()})"]
    return result.stdout.splitlines()


def _code_section(a: CellEvidence, b: CellEvidence, repo_path: Path | None) -> Section:
    section = Section("code", SECTION_TITLES["code"])
    pin_a, pin_b = _as_dict(a.cell.get("repo")), _as_dict(b.cell.get("repo"))
    repo_a, repo_b = dict(a.repo), dict(b.repo)
    # before the repo step ran there is no repo.json: the plan's requested ref still counts
    repo_a.setdefault("requested", pin_a.get("version"))
    repo_b.setdefault("requested", pin_b.get("version"))
    for key in _REPO_FIELDS:
        va, vb = repo_a.get(key), repo_b.get(key)
        if not _same(va, vb):
            section.entries.append(Entry(key, va, vb))
    for key in ("url", "dest", "setup"):
        if not _same(pin_a.get(key), pin_b.get(key)):
            section.entries.append(Entry(f"repo.{key}", pin_a.get(key), pin_b.get(key)))
    sha_a, sha_b = repo_a.get("sha"), repo_b.get("sha")
    if not (isinstance(sha_a, str) and isinstance(sha_b, str) and sha_a and sha_b):
        return section
    if sha_a == sha_b:
        return section
    candidates = [repo_path] if repo_path is not None else _repo_candidates(a, b)
    repo = next((c for c in candidates if _has_commits(c, (sha_a, sha_b))), None)
    if repo is None:
        tried = ", ".join(str(c) for c in candidates) or "nothing (no repo dest or local url)"
        section.notes.append(
            f"commit history not shown: no git repository here holds both {sha_a} and {sha_b} "
            f"(tried: {tried}); point the diff at a clone that has both"
        )
        return section
    section.notes.append(f"history from the git repository at {repo}")
    forward = _git_lines(repo, "log", "--oneline", "--no-decorate", f"{sha_a}..{sha_b}")
    backward = _git_lines(repo, "log", "--oneline", "--no-decorate", f"{sha_b}..{sha_a}")
    short_a, short_b = sha_a[:12], sha_b[:12]
    if forward or not backward:
        section.blocks.append(
            Block(
                f"commits in B, not in A (git log --oneline {short_a}..{short_b}): {len(forward)}",
                forward,
            )
        )
    if backward:
        section.blocks.append(
            Block(
                f"commits in A, not in B (git log --oneline {short_b}..{short_a}): "
                f"{len(backward)} (B is behind A or diverged)",
                backward,
            )
        )
    # an explicit huge width: git abbreviates long paths to fit 80 columns otherwise
    stat = _git_lines(repo, "diff", "--stat=100000,100000", "--stat-graph-width=40", sha_a, sha_b)
    section.blocks.append(Block(f"git diff --stat {short_a} {short_b}", stat))
    return section


# --- packages ----------------------------------------------------------------------------------


def _package_key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def parse_pip_freeze(value: Any) -> dict[str, str] | None:
    """`pip freeze` output (text, list of lines, or {name: version}) as {normalized name: version}.

    `name==1.2`, `name @ url` (version "@ url"), `-e git+...#egg=name` (version the whole line).
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {_package_key(str(k)): str(v) for k, v in value.items()}
    lines = value.splitlines() if isinstance(value, str) else [str(v) for v in value]
    out: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-e ", "--editable ")):
            egg = re.search(r"[#&]egg=([^&\s]+)", line)
            out[_package_key(egg.group(1) if egg else line)] = line
        elif " @ " in line:
            name, _, url = line.partition(" @ ")
            out[_package_key(name)] = f"@ {url.strip()}"
        elif "==" in line:
            name, _, version = line.partition("==")
            out[_package_key(name)] = version.lstrip("=").strip()
        else:
            out[_package_key(line)] = ""
    return out


def _pip_freeze_of(snapshot: Snapshot) -> tuple[dict[str, str] | None, str | None]:
    """(packages, None), or (None, why not) when the snapshot has no usable pip freeze."""
    reason = snapshot.absent(shape.PIP_FREEZE)
    if reason is not None:
        return None, reason
    raw = snapshot.item(shape.PIP_FREEZE)
    if not isinstance(raw, list | str | dict):
        return None, "not recorded"
    return parse_pip_freeze(raw), None


def _packages_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("packages", SECTION_TITLES["packages"])
    (fa, why_a), (fb, why_b) = _pip_freeze_of(a.pre), _pip_freeze_of(b.pre)
    if fa is None or fb is None:
        if fa is not None or fb is not None:
            side, why = ("B", why_b) if fa is not None else ("A", why_a)
            section.notes.append(f"pip freeze missing for {side} ({why}): packages not compared")
        return section
    for name in sorted(set(fa) | set(fb)):
        va, vb = fa.get(name), fb.get(name)
        if va != vb:
            note = "added" if va is None else "removed" if vb is None else "changed"
            section.entries.append(Entry(name, va, vb, note))
    return section


# --- environment -------------------------------------------------------------------------------


def _observed(env_check: Mapping[str, Any]) -> dict[str, list[str | None]]:
    """Per variable: the value each checked server process saw (None where it was unset)."""
    out: dict[str, list[str | None]] = {}
    processes = env_check.get("processes")
    if not isinstance(processes, list):
        return out
    for proc in processes:
        for name, check in _as_dict(_as_dict(proc).get("vars")).items():
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
    declared_a = _as_dict(a.cell.get("env")) or _as_dict(a.server.get("env_declared"))
    declared_b = _as_dict(b.cell.get("env")) or _as_dict(b.server.get("env_declared"))
    section.entries += _dict_entries(declared_a, declared_b, key_format="{} (declared)")
    host_a, host_b = a.pre.env, b.pre.env
    section.entries += _dict_entries(host_a, host_b, key_format="{} (host, as the probe saw it)")
    return section


# --- server flags ------------------------------------------------------------------------------

# the runner's own cell directory on the host, `<workdir>/runs/<run id>/.<cell id>.partial`: a
# server started there (no repo, no cwd given) has a cwd that differs in every run
_CELL_DIR_ON_HOST = re.compile(r"/runs/[^/]+/\.[^/]+\.partial(?=/|$)")


def _run_neutral_path(value: Any) -> Any:
    """A path with the run's own cell directory replaced by a placeholder (other values as is)."""
    if isinstance(value, str):
        return _CELL_DIR_ON_HOST.sub("/runs/<run>/<cell directory>", value)
    return value


def _server_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("server_flags", SECTION_TITLES["server_flags"])
    spec_a, spec_b = _as_dict(a.cell.get("server")), _as_dict(b.cell.get("server"))
    section.entries += _dict_entries(
        _as_dict(spec_a.get("args")), _as_dict(spec_b.get("args")), key_format="--{}"
    )
    for key in ("adapter",):
        if not _same(spec_a.get(key), spec_b.get(key)):
            section.entries.append(Entry(key, spec_a.get(key), spec_b.get(key)))
    argv_a = a.server.get("argv") or spec_a.get("argv")
    argv_b = b.server.get("argv") or spec_b.get("argv")
    if not _same(argv_a, argv_b):
        section.entries.append(
            Entry(
                "argv",
                shlex.join(str(x) for x in argv_a) if isinstance(argv_a, list) else argv_a,
                shlex.join(str(x) for x in argv_b) if isinstance(argv_b, list) else argv_b,
            )
        )
    cwd_a, cwd_b = a.server.get("cwd"), b.server.get("cwd")
    if not _same(_run_neutral_path(cwd_a), _run_neutral_path(cwd_b)):
        section.entries.append(Entry("cwd", cwd_a, cwd_b))
    # what the server itself reports (e.g. SGLang's server_info): its effective arguments
    for name in sorted(k for k in {*a.captures, *b.captures} if k.endswith(".ready")):
        doc_a, doc_b = _as_dict(a.captures.get(name)), _as_dict(b.captures.get(name))
        scalars_a = {k: v for k, v in doc_a.items() if not isinstance(v, dict | list)}
        scalars_b = {k: v for k, v in doc_b.items() if not isinstance(v, dict | list)}
        capture = name.removesuffix(".ready")
        section.entries += _dict_entries(
            scalars_a, scalars_b, key_format=f"{{}} (reported by the server, {capture})"
        )
    return section


def _bench_section(a: CellEvidence, b: CellEvidence) -> Section:
    """The benchmark itself: prompts, lengths, concurrency, warmups and repeats move metrics
    without any cause on the server side."""
    section = Section("bench", SECTION_TITLES["bench"])
    spec_a, spec_b = _as_dict(a.cell.get("bench")), _as_dict(b.cell.get("bench"))
    args_a, args_b = _as_dict(spec_a.get("args")), _as_dict(spec_b.get("args"))
    section.entries += _dict_entries(args_a, args_b, key_format="--{}")
    for key in ("adapter", "warmup", "repeats", "timeout", "metrics"):
        if not _same(spec_a.get(key), spec_b.get(key)):
            section.entries.append(Entry(key, spec_a.get(key), spec_b.get(key)))
    argv_a, argv_b = spec_a.get("argv"), spec_b.get("argv")
    # The argv repeats the args; shown only when it differs some other way (a command bench).
    if not section.entries and not _same(argv_a, argv_b):
        section.entries.append(
            Entry(
                "argv",
                shlex.join(str(x) for x in argv_a) if isinstance(argv_a, list) else argv_a,
                shlex.join(str(x) for x in argv_b) if isinstance(argv_b, list) else argv_b,
            )
        )
    return section


# --- system ------------------------------------------------------------------------------------


def _system_values(cell: CellEvidence) -> dict[str, Any]:
    values = {label: cell.pre.value(path) for label, path in shape.SYSTEM_FIELDS}
    if values["os"] is None:
        values["os"] = cell.pre.value(shape.OS_NAME)
    if values["driver"] is None:
        gpus = cell.pre.gpus
        if gpus:
            values["driver"] = gpus[0].get("driver_version")
    # the library the server really loaded: its own log line (post snapshot as a fallback)
    values["NCCL (server log)"] = cell.nccl_log_version() or cell.post.value(shape.NCCL_SERVER_LOG)
    return values


def _system_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("system", SECTION_TITLES["system"])
    section.entries += _dict_entries(_system_values(a), _system_values(b))
    return section


# --- hardware ----------------------------------------------------------------------------------

# label, the probe's key (`shape.GPU_FIELDS`), tolerance: ("rel", x) / ("abs", x) for noisy
# readings
_GPU_FIELDS: list[tuple[str, str, tuple[str, float] | None]] = [
    ("name", "name", None),
    ("pstate", "pstate", None),
    ("clocks.sm", "clocks.sm", ("rel", 0.10)),
    ("clocks.max.sm", "clocks.max.sm", None),
    ("clocks.mem", "clocks.mem", ("rel", 0.10)),
    ("clocks.max.memory", "clocks.max.memory", None),
    ("pcie.link.gen.current", "pcie.link.gen.gpucurrent", None),
    ("pcie.link.gen.max", "pcie.link.gen.max", None),
    ("pcie.link.width.current", "pcie.link.width.current", None),
    ("pcie.link.width.max", "pcie.link.width.max", None),
    ("power.draw", "power.draw", ("rel", 0.20)),
    ("power.limit", "power.limit", None),
    ("temperature.gpu", "temperature.gpu", ("abs", 10.0)),
    (shape.REASON_FIELD, shape.REASON_FIELD, None),
    ("persistence_mode", "persistence_mode", None),
    ("ecc.mode.current", "ecc.mode.current", None),
]
# label of a current reading -> label of its maximum: "below max" is the throttling signal
_CURRENT_VS_MAX = {
    "clocks.sm": "clocks.max.sm",
    "clocks.mem": "clocks.max.memory",
    "pcie.link.gen.current": "pcie.link.gen.max",
    "pcie.link.width.current": "pcie.link.width.max",
}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*[A-Za-z%]*\s*", value)
        if match:
            return float(match.group(1))
        if re.fullmatch(r"\s*0x[0-9a-fA-F]+\s*", value):
            return float(int(value, 16))
    return None


def decode_event_reasons(value: Any) -> str | None:
    """Names of the set bits of a clocks event (throttle) reasons mask such as `0x...04`."""
    if isinstance(value, str) and re.fullmatch(r"\s*0x[0-9a-fA-F]+\s*", value):
        mask = int(value, 16)
    elif isinstance(value, int) and not isinstance(value, bool):
        mask = value
    else:
        return None
    if mask == 0:
        return "none"
    names = [shape.nvml_name(name) for bit, name in shape.CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~shape.KNOWN_REASON_BITS
    if unknown:
        names.append(hex(unknown))
    return "+".join(names)


def _gpu_readings(gpu: Mapping[str, Any]) -> dict[str, Any]:
    return {label: gpu.get(key) for label, key, _ in _GPU_FIELDS}


def _within(tolerance: tuple[str, float] | None, a: Any, b: Any) -> bool:
    na, nb = _number(a), _number(b)
    if tolerance is None or na is None or nb is None:
        return False
    kind, amount = tolerance
    if kind == "abs":
        return abs(na - nb) <= amount
    return abs(na - nb) <= amount * max(abs(na), abs(nb))


def _below_max(readings: Mapping[str, Any], label: str) -> str | None:
    current, top = _number(readings.get(label)), _number(readings.get(_CURRENT_VS_MAX[label]))
    if current is None or top is None or current >= top:
        return None
    return f"{readings.get(label)} of max {readings.get(_CURRENT_VS_MAX[label])}"


# Readings the run itself moves (heat, power, clocks under load): compared after the run too,
# where a GPU that throttled during the benchmark shows.
_POST_RUN_LABELS = ("clocks.sm", shape.REASON_FIELD, "temperature.gpu", "power.draw")
_TOPO_AFFINITY = ("CPU Affinity", "NUMA Affinity")


def _by_index(gpus: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for position, gpu in enumerate(gpus):
        index = gpu.get("index")
        out[str(index if index is not None else position)] = gpu
    return out


def _gpu_entries(
    gpus_a: list[dict[str, Any]], gpus_b: list[dict[str, Any]], labels: Sequence[str], suffix: str
) -> list[Entry]:
    """Entries `GPU <index> <label><suffix>` for the readings of `labels` that differ."""
    indexed_a, indexed_b = _by_index(gpus_a), _by_index(gpus_b)
    tolerances = {label: tol for label, _, tol in _GPU_FIELDS}
    entries: list[Entry] = []
    for index in list(indexed_a) + [i for i in indexed_b if i not in indexed_a]:
        ra = _gpu_readings(indexed_a.get(index, {}))
        rb = _gpu_readings(indexed_b.get(index, {}))
        for label in labels:
            va, vb = ra[label], rb[label]
            if _same(va, vb):
                continue
            notes: list[str] = []
            if label in _CURRENT_VS_MAX:
                for side, readings in (("A", ra), ("B", rb)):
                    below = _below_max(readings, label)
                    if below:
                        notes.append(f"{side} below max ({below})")
            if label == shape.REASON_FIELD:
                notes.append(
                    f"A: {decode_event_reasons(va) or _text(va)}, "
                    f"B: {decode_event_reasons(vb) or _text(vb)}"
                )
            entries.append(
                Entry(
                    f"GPU {index} {label}{suffix}",
                    va,
                    vb,
                    "; ".join(notes) or None,
                    within_tolerance=_within(tolerances[label], va, vb),
                )
            )
    return entries


def _topology_entries(a: Snapshot, b: Snapshot) -> list[Entry]:
    """Links (`nvidia-smi topo -m`: NV18, PIX, SYS, ...) and CPU/NUMA affinity that differ.

    A GPU pair that moved from NVLink to SYS, or a NIC no longer behind the GPU's PCIe switch,
    changes what NCCL can do; each pair is one entry (the matrix is symmetric).
    """
    ta, tb = a.topo, b.topo
    if not ta or not tb:
        return []
    links_a, links_b = ta[shape.TOPO_LINKS], tb[shape.TOPO_LINKS]
    devices = list(links_a) + [d for d in links_b if d not in links_a]
    entries: list[Entry] = []
    for i, dev in enumerate(devices):
        row_a, row_b = _as_dict(links_a.get(dev)), _as_dict(links_b.get(dev))
        for other in devices[i + 1 :]:
            va, vb = row_a.get(other), row_b.get(other)
            if not _same(va, vb):
                entries.append(Entry(f"topology {dev}-{other}", va, vb))
    aff_a, aff_b = _as_dict(ta.get(shape.TOPO_AFFINITY)), _as_dict(tb.get(shape.TOPO_AFFINITY))
    for dev in devices:
        da, db = _as_dict(aff_a.get(dev)), _as_dict(aff_b.get(dev))
        for name in _TOPO_AFFINITY:
            if not _same(da.get(name), db.get(name)):
                entries.append(Entry(f"topology {dev} {name}", da.get(name), db.get(name)))
    return entries


def _hardware_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("hardware", SECTION_TITLES["hardware"])
    gpus_a, gpus_b = a.pre.gpus, b.pre.gpus
    if len(gpus_a) != len(gpus_b):
        section.entries.append(Entry("GPU count", len(gpus_a), len(gpus_b)))
    labels = [label for label, _, _ in _GPU_FIELDS]
    section.entries += _gpu_entries(gpus_a, gpus_b, labels, "")
    post_a, post_b = a.post.gpus, b.post.gpus
    if post_a and post_b:
        section.entries += _gpu_entries(post_a, post_b, _POST_RUN_LABELS, " after run")
    section.entries += _topology_entries(a.pre, b.pre)
    if not gpus_a and not gpus_b and (a.snapshot_pre or b.snapshot_pre):
        section.notes.append("no GPU readings in either snapshot")
    return section


# --- metrics -----------------------------------------------------------------------------------


def _metrics_section(
    a: CellEvidence, b: CellEvidence, ratio_threshold: float, alpha: float
) -> Section:
    section = Section("metrics", SECTION_TITLES["metrics"])
    names = a.metric_names + [m for m in b.metric_names if m not in a.metric_names]
    for name in names:
        va, vb = a.values(name), b.values(name)
        if va and vb:
            c = compare(va, vb, ratio_threshold=ratio_threshold, alpha=alpha)
            significant: bool | None = c.significant
            if c.method == "single" and c.delta != 0:
                # One run on a side shows no noise: a move past the threshold cannot be judged
                # either way (None counts as a difference to look at, marked "can't tell").
                moved = c.ratio is None or abs(c.ratio - 1.0) >= ratio_threshold
                significant = None if moved else False
            section.metrics.append(
                MetricDelta(
                    name,
                    len(va),
                    len(vb),
                    c.median_a,
                    c.median_b,
                    c.delta_pct,
                    significant,
                    c.method,
                    c.p_value,
                )
            )
        else:
            section.metrics.append(
                MetricDelta(
                    name,
                    len(va),
                    len(vb),
                    median(va) if va else None,
                    median(vb) if vb else None,
                    None,
                    None,
                    None,
                    None,
                )
            )
    return section


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
    """
    sections = [
        _code_section(a, b, repo_path),
        _packages_section(a, b),
        _environment_section(a, b),
        _server_section(a, b),
        _bench_section(a, b),
        _system_section(a, b),
        _hardware_section(a, b),
        _metrics_section(a, b, ratio_threshold, alpha),
    ]
    return CellDiff(CellRef.of(a), CellRef.of(b), paired_by, sections)


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
    """Pair cells by id, then the rest by (axes, host), and diff each pair; list the unpaired."""
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
    return RunDiff(
        a_run=a_cells[0].run_id if a_cells else None,
        b_run=b_cells[0].run_id if b_cells else None,
        pairs=diffs,
        only_a=[CellRef.of(c) for c in only_a],
        only_b=[CellRef.of(c) for c in only_b],
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


# --- rendering ---------------------------------------------------------------------------------


def _entry_lines(entry: Entry) -> list[str]:
    ta, tb = _text(entry.a), _text(entry.b)
    note = f"  ({entry.note})" if entry.note else ""
    if "\n" in ta or "\n" in tb or len(ta) + len(tb) > 90:
        lines = [f"  {entry.key}:{note}"]
        lines += ["    A: " + line for line in ta.splitlines() or [""]]
        lines += ["    B: " + line for line in tb.splitlines() or [""]]
        return lines
    return [f"  {entry.key}: {ta} -> {tb}{note}"]


def _metric_lines(metrics: list[MetricDelta]) -> list[str]:
    rows = []
    for m in metrics:
        if m.significant is None and m.method == "single":
            verdict = f"can't tell (one run on a side: n={m.n_a}/{m.n_b}; add repeats)"
        elif m.significant is None:
            verdict = "n/a (missing on one side)"
        else:
            test = f"{m.method}, p={m.p_value:.3g}" if m.p_value is not None else f"{m.method}"
            verdict = f"{'yes' if m.significant else 'no'} ({test}; n={m.n_a}/{m.n_b})"
        delta = "-" if m.delta_pct is None else f"{m.delta_pct:+.1f}%"
        rows.append(
            [m.metric, format_number(m.median_a), format_number(m.median_b), delta, verdict]
        )
    table = tabulate(
        rows,
        headers=["metric", "median A", "median B", "delta", "significant"],
        disable_numparse=True,
    )
    return ["  " + line for line in table.splitlines()]


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


def _cell_diff_lines(diff: CellDiff, max_lines_inline: int, spill_dir: Path | None) -> list[str]:
    lines = [f"A: {_describe(diff.a)}", f"B: {_describe(diff.b)}"]
    if diff.paired_by == "axes":
        lines.append("(paired by axis values and host: the cell ids differ)")
    for side, ref in (("A", diff.a), ("B", diff.b)):
        if ref.status not in (None, "passed"):
            step = f" at step {ref.failed_step}" if ref.failed_step else ""
            lines.append(f"{side} {ref.status}{step}: {ref.reason or '(no reason recorded)'}")
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
        if spill_dir is not None and len(body) > max_lines_inline:
            spill_dir.mkdir(parents=True, exist_ok=True)
            path = spill_dir / f"{_safe_name(label)}.{section.name}.txt"
            path.write_text("\n".join(body) + "\n", encoding="utf-8")
            lines += body[:max_lines_inline]
            lines.append(f"  ... {len(body) - max_lines_inline} more lines; full section: {path}")
        else:
            lines += body
    if diff.unchanged:
        names = ", ".join(n.replace("_", " ") for n in diff.unchanged)
        if within_noise:
            names += " (no significant change)"
        lines += ["", f"no differences in: {names}"]
    return lines


def diff_to_dict(diff: CellDiff | RunDiff) -> dict[str, Any]:
    """The complete diff as plain data (what `--json` prints)."""
    data = asdict(diff)
    if isinstance(diff, CellDiff):
        data["differing"] = [s.name for s in diff.differing]
        data["unchanged"] = diff.unchanged
    else:
        for pair, pair_data in zip(diff.pairs, data["pairs"], strict=True):
            pair_data["differing"] = [s.name for s in pair.differing]
            pair_data["unchanged"] = pair.unchanged
    return data


def _run_summary(diff: RunDiff) -> list[str]:
    lines = [f"A: {diff.a_run or '?'}    B: {diff.b_run or '?'}"]
    by_id = sum(1 for p in diff.pairs if p.paired_by == "id")
    lines.append(
        f"{len(diff.pairs)} cell pairs ({by_id} by id, {len(diff.pairs) - by_id} by axes+host); "
        f"only in A: {len(diff.only_a)}; only in B: {len(diff.only_b)}"
    )
    counts = {name: 0 for name in SECTION_ORDER}
    for pair in diff.pairs:
        for section in pair.differing:
            counts[section.name] += 1
    shown = [(n, c) for n, c in counts.items() if c]
    if shown:
        lines.append("differences, most likely cause first:")
        for name, count in shown:
            lines.append(f"  {name.replace('_', ' ')}: {count} of {len(diff.pairs)} pairs")
    unchanged = [n.replace("_", " ") for n, c in counts.items() if not c]
    if diff.pairs and unchanged:
        lines.append(f"no differences in any pair: {', '.join(unchanged)}")
    for side, refs in (("A", diff.only_a), ("B", diff.only_b)):
        for ref in refs:
            lines.append(f"only in {side}: {_describe(ref)}")
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
