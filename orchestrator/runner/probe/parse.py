"""The probe's pure parsers: nvidia-smi, nvcc, /proc and os-release text into plain data.

No subprocess here: the controller imports these for tests and analysis, and the probe
(`probe.py`) calls them on what the tools printed. Python 3.8, standard library only.
"""

from __future__ import annotations

import csv
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence

# the one declared shape, re-exported under the names the probe has always used
from orchestrator.runner.probe.shape import CLOCK_EVENT_REASONS as CLOCK_EVENT_REASONS
from orchestrator.runner.probe.shape import GPU_FIELDS as GPU_FIELDS
from orchestrator.runner.probe.shape import LEGACY_GPU_FIELDS as LEGACY_GPU_FIELDS
from orchestrator.runner.probe.shape import REASON_FIELD as REASON_FIELD
from orchestrator.runner.probe.shape import (
    decode_clock_event_reasons as decode_clock_event_reasons,
)

LEGACY_FIELDS = LEGACY_GPU_FIELDS

_NUMERIC_FIELDS = frozenset(
    (
        "index",
        "clocks.sm",
        "clocks.max.sm",
        "clocks.mem",
        "clocks.max.memory",
        "pcie.link.gen.gpucurrent",
        "pcie.link.gen.current",
        "pcie.link.gen.max",
        "pcie.link.width.current",
        "pcie.link.width.max",
        "power.draw",
        "power.limit",
        "temperature.gpu",
        "memory.used",
        "memory.total",
    )
)
_UNAVAILABLE = re.compile(
    r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost)\]?$", re.I
)

# --- secret names (shared with orchestrator.secrets.rule, which re-exports these) --------

# --- pure parsers ---------------------------------------------------------------------------


def short_tail(text: str, limit: int = 500) -> str:
    """The end of a tool's output, at most `limit` characters, for an `absent` reason."""
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def parse_value(field: str, raw: str) -> Any:
    """One nvidia-smi CSV value: `[N/A]`/`[Not Supported]` -> None, numeric fields -> numbers."""
    text = raw.strip()
    if text == "" or _UNAVAILABLE.match(text):
        return None
    if field in _NUMERIC_FIELDS:
        number = text.split()[0]  # tolerate units ("81559 MiB") when nounits was not honoured
        try:
            return int(number)
        except ValueError:
            try:
                return float(number)
            except ValueError:
                return text
    return text


def _split_csv_line(line: str) -> List[str]:
    return next(csv.reader([line], skipinitialspace=True))


def canonical_field(field: str) -> str:
    """The newest name of an nvidia-smi field (old names map to new ones)."""
    for new, old in LEGACY_FIELDS.items():
        if field == old:
            return new
    return field


def parse_gpu_csv(text: str, fields: Sequence[str]) -> List[Dict[str, Any]]:
    """`--query-gpu=FIELDS --format=csv,noheader,nounits` output -> one dict per GPU.

    Keys are the newest field names whatever names were queried, so snapshots from old and
    new drivers compare key by key. The reasons bitmask stays a string, with decoded names
    beside it under `clocks_event_reasons.names`; unavailable raw values are kept under
    `unavailable` so `[Not Supported]` and `[N/A]` stay distinguishable.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = _split_csv_line(line)
        if len(values) != len(fields):
            raise ValueError(
                "expected %d values, got %d in line %r" % (len(fields), len(values), line)
            )
        gpu = {}  # type: Dict[str, Any]
        unavailable = {}  # type: Dict[str, str]
        for field, raw in zip(fields, values):  # noqa: B905 (3.8: no strict=)
            key = canonical_field(field)
            value = parse_value(key, raw)
            if value is None and raw.strip():
                unavailable[key] = raw.strip()
            gpu[key] = value
        if REASON_FIELD in gpu:
            gpu["clocks_event_reasons.names"] = decode_clock_event_reasons(gpu[REASON_FIELD])
        if unavailable:
            gpu["unavailable"] = unavailable
        gpus.append(gpu)
    return gpus


def parse_compute_apps(text: str) -> List[Dict[str, Any]]:
    """`--query-compute-apps=pid,process_name,used_memory` CSV -> [{pid, name, used_memory_mib}]."""
    apps = []
    for line in text.splitlines():
        if not line.strip() or line.lower().startswith("no running"):
            continue
        values = _split_csv_line(line)
        if len(values) < 3:
            raise ValueError("unexpected compute-apps line %r" % line)
        pid_raw, name, mem_raw = values[0], ",".join(values[1:-1]), values[-1]
        pid = parse_value("index", pid_raw)
        apps.append(
            {
                "pid": pid,
                "process_name": name.strip(),
                "used_memory_mib": parse_value("memory.used", mem_raw),
            }
        )
    return apps


def parse_gpu_apps(text: str) -> List[Dict[str, Any]]:
    """`--query-compute-apps=gpu_uuid,pid,used_memory,process_name` CSV (noheader, nounits)
    -> [{gpu_uuid, pid, used_memory_mib, process_name}]; the name last, as it may hold commas."""
    apps = []
    for line in text.splitlines():
        if not line.strip() or line.lower().startswith("no running"):
            continue
        values = _split_csv_line(line)
        if len(values) < 4:
            raise ValueError("unexpected compute-apps line %r" % line)
        apps.append(
            {
                "gpu_uuid": values[0].strip(),
                "pid": parse_value("index", values[1]),
                "used_memory_mib": parse_value("memory.used", values[2]),
                "process_name": ",".join(values[3:]).strip(),
            }
        )
    return apps


_SMI_VERSION = re.compile(r"NVIDIA-SMI\s+([\w.\-]+)")
_DRIVER_VERSION = re.compile(r"Driver Version:\s*([\w.\-]+)")
_CUDA_VERSION = re.compile(r"CUDA Version:\s*([\w.\-]+)")


def parse_smi_header(text: str) -> Dict[str, Optional[str]]:
    """Plain `nvidia-smi` output -> {smi_version, driver_version, cuda_version} (driver's CUDA)."""
    out = {}  # type: Dict[str, Optional[str]]
    for key, pattern in (
        ("smi_version", _SMI_VERSION),
        ("driver_version", _DRIVER_VERSION),
        ("cuda_version", _CUDA_VERSION),
    ):
        match = pattern.search(text)
        out[key] = match.group(1) if match else None
    return out


_NVCC = re.compile(r"release\s+([\d.]+),\s*V([\w.\-]+)")


def parse_nvcc_version(text: str) -> Dict[str, Optional[str]]:
    """`nvcc --version` -> {release: "12.4", version: "12.4.131"}."""
    match = _NVCC.search(text)
    if not match:
        raise ValueError("no 'release X.Y, VX.Y.Z' in nvcc output: %r" % short_tail(text, 200))
    return {"release": match.group(1), "version": match.group(2)}


def parse_topo(text: str) -> Dict[str, Any]:
    """Best effort over `nvidia-smi topo -m`: devices, the link matrix and CPU/NUMA affinity."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("empty topo output")
    header = [h.strip() for h in lines[0].split("\t") if h.strip()]
    devices = [h for h in header if not h.endswith("Affinity") and h != "GPU NUMA ID"]
    extra = header[len(devices) :]
    links = {}  # type: Dict[str, Dict[str, str]]
    affinity = {}  # type: Dict[str, Dict[str, str]]
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("\t")]
        if not cells or cells[0] not in devices:
            continue
        values = cells[1:]
        links[cells[0]] = dict(zip(devices, values[: len(devices)]))  # noqa: B905
        rest = [c for c in values[len(devices) :] if c]  # real output has doubled tabs
        if extra:
            affinity[cells[0]] = dict(zip(extra, rest))  # noqa: B905
    return {"devices": devices, "links": links, "affinity": affinity}


_NCCL_LOG = re.compile(r"NCCL version\s+([0-9][\w.+\-]*)")


def find_nccl_versions(lines: Iterable[str]) -> List[str]:
    """Distinct `NCCL version X` values in a log, in order of first appearance."""
    seen = []  # type: List[str]
    for line in lines:
        if "NCCL version" not in line:
            continue
        for match in _NCCL_LOG.finditer(line):
            if match.group(1) not in seen:
                seen.append(match.group(1))
    return seen


def parse_os_release(text: str) -> Dict[str, str]:
    """/etc/os-release -> {NAME: value} with quotes removed."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_cpuinfo(text: str) -> Dict[str, Any]:
    """/proc/cpuinfo -> {model, logical, sockets, physical_cores}."""
    model = None
    logical = 0
    sockets = set()
    cores = set()
    physical = None
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, value = (s.strip() for s in line.split(":", 1))
        if key == "processor":
            logical += 1
        elif key in ("model name", "Model") and model is None:
            model = value
        elif key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            cores.add((physical, value))
    return {
        "model": model,
        "logical": logical or None,
        "sockets": len(sockets) or None,
        "physical_cores": len(cores) or None,
    }


_MEMINFO_KEYS = (
    "MemTotal",
    "MemFree",
    "MemAvailable",
    "Cached",
    "SwapTotal",
    "SwapFree",
    "HugePages_Total",
    "HugePages_Free",
    "Hugepagesize",
)


def parse_meminfo(text: str) -> Dict[str, int]:
    """/proc/meminfo -> {MemTotal_kib: ..., HugePages_Total: ...} for the keys that matter."""
    out = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, value = line.split(":", 1)
        key = key.strip()
        if key not in _MEMINFO_KEYS:
            continue
        parts = value.split()
        if not parts:
            continue
        unit = parts[1] if len(parts) > 1 else ""
        out[key + ("_kib" if unit == "kB" else "")] = int(parts[0])
    return out


def parse_loadavg(text: str) -> Dict[str, Any]:
    """/proc/loadavg -> {1m, 5m, 15m, running, total}."""
    parts = text.split()
    running, total = parts[3].split("/")
    return {
        "1m": float(parts[0]),
        "5m": float(parts[1]),
        "15m": float(parts[2]),
        "running": int(running),
        "total": int(total),
    }
