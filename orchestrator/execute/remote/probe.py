#!/usr/bin/env python3
"""The snapshot probe: what a host looked like at one moment, as one JSON object.

Shipped next to the runner and run under the host's own python3 (3.8 or newer), so: standard
library only, no `match`, no runtime `X | Y` types. The runner calls
`probe.snapshot(repo_dir, python, server_log)`; `python3 probe.py [--repo DIR] [--python PY]
[--server-log FILE]` prints the same object. The controller imports it as
`orchestrator.execute.remote.probe` for the pure parsers, so nothing here may rely on a
relative import.

Every item is collected on its own: a missing tool, a timeout or a parse error becomes
`{"absent": "<reason>"}` for that item only, and `snapshot()` never raises.
"""

import contextlib
import csv
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

SCHEMA_VERSION = 1
REDACTED = "***REDACTED***"

# The REFERENCE.md field list, newest names first; `_LEGACY` maps them to pre-~535.113 names.
GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "driver_version",
    "pci.bus_id",
    "pstate",
    "compute_cap",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "clocks.max.memory",
    "pcie.link.gen.gpucurrent",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "memory.used",
    "memory.total",
    "persistence_mode",
    "ecc.mode.current",
    "clocks_event_reasons.active",
)
_LEGACY = {
    "pcie.link.gen.gpucurrent": "pcie.link.gen.current",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
}
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
REASON_FIELD = "clocks_event_reasons.active"
# NVML's nvmlClocksEventReasons bits (nvml.h), lowest first.
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "VLLM_", "TORCH_", "PYTORCH_")
ENV_EXTRA = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS")  # they change which libs load

_UNAVAILABLE = re.compile(
    r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost)\]?$", re.I
)

# --- secret names (shared with orchestrator.results.redact, which re-exports these) --------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def _name_parts(name: str) -> List[str]:
    return [p.upper() for p in _WORD_SPLIT.split(_CAMEL.sub("_", name)) if p]


def is_secret_name(name: str) -> bool:
    """True for names that hold secrets: HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, apiKey.

    The name is split into word parts (on `_`, `-`, `.` and camelCase). A part that is or ends
    with TOKEN (HFTOKEN), or is KEY / KEYS / ends with APIKEY, or contains SECRET, PASSWORD, PASSWD,
    CREDENTIAL makes it secret. Word parts keep TOKENIZERS_PARALLELISM, MAX_TOKENS,
    KEYBOARD_LAYOUT and MONKEY_PATCH non-secret.
    """
    for part in _name_parts(name):
        if part.endswith("TOKEN") or part in ("KEY", "KEYS") or part.endswith("APIKEY"):
            return True
        for word in ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"):
            if word in part:
                return True
    return False


# --- running commands -----------------------------------------------------------------------


class Absent(Exception):
    """An item could not be collected; the message is the reason recorded in the snapshot."""


def _cmd_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # stable, parseable tool output
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def run_command(
    argv: Sequence[str], timeout: float, cwd: Optional[str] = None
) -> Tuple[int, str, str]:
    """Run argv without a shell; (rc, stdout, stderr). Absent when missing or timed out.

    The child gets its own session so a timeout kills everything it started.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=_cmd_env(),
            start_new_session=True,
        )
    except FileNotFoundError:
        raise Absent("%s: not found" % argv[0]) from None
    except OSError as exc:
        raise Absent("%s: cannot run: %s" % (argv[0], exc)) from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise Absent("%s: timed out after %ss" % (" ".join(argv[:3]), timeout)) from None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _tail(text: str, limit: int = 500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _which(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise Absent("%s not found on PATH" % tool)
    return path


# --- pure parsers ---------------------------------------------------------------------------


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


def decode_clock_event_reasons(mask: Optional[str]) -> Optional[List[str]]:
    """`0x...48` -> ["hw_slowdown", "hw_thermal_slowdown"]; unknown bits as `bit_0x...`."""
    if mask is None:
        return None
    try:
        value = int(mask, 16)
    except ValueError:
        return None
    names = []
    known = 0
    for bit, name in CLOCK_EVENT_REASONS:
        known |= bit
        if value & bit:
            names.append(name)
    rest = value & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("bit_%#x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def _split_csv_line(line: str) -> List[str]:
    return next(csv.reader([line], skipinitialspace=True))


def canonical_field(field: str) -> str:
    """The newest name of an nvidia-smi field (old names map to new ones)."""
    for new, old in _LEGACY.items():
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
        raise ValueError("no 'release X.Y, VX.Y.Z' in nvcc output: %r" % _tail(text, 200))
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


def collect_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables that shape GPU serving, secret-looking values redacted."""
    out = {}
    for name in sorted(environ):
        if name.startswith(ENV_PREFIXES) or name in ENV_EXTRA:
            out[name] = REDACTED if is_secret_name(name) else environ[name]
    return out


# --- collectors (each may raise; snapshot() wraps them) -------------------------------------


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        raise Absent("cannot read %s: %s" % (path, exc.strerror or exc)) from None


def _kernel() -> Dict[str, Any]:
    u = os.uname()
    return {"system": u.sysname, "release": u.release, "version": u.version, "machine": u.machine}


def _os() -> Dict[str, str]:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        if os.path.exists(path):
            return parse_os_release(_read(path))
    raise Absent("no /etc/os-release")


def _cpu() -> Dict[str, Any]:
    info = {"count": os.cpu_count(), "arch": platform.machine()}  # type: Dict[str, Any]
    if hasattr(os, "sched_getaffinity"):
        info["usable"] = len(os.sched_getaffinity(0))
    try:
        info.update(parse_cpuinfo(_read("/proc/cpuinfo")))
    except Absent as exc:
        info["cpuinfo"] = {"absent": str(exc)}
    return info


_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field')


def _variant(fields: Sequence[str]) -> str:
    if list(fields) == list(GPU_FIELDS):
        return "current"
    if list(fields) == [_LEGACY.get(f, f) for f in GPU_FIELDS]:
        return "legacy"
    return "mixed"


def _gpus(smi: str) -> Dict[str, Any]:
    """Query every field; on a rejected name swap it for its other spelling and ask again."""
    swap = dict(_LEGACY)
    swap.update((old, new) for new, old in _LEGACY.items())
    fields = list(GPU_FIELDS)
    tried = []  # type: List[List[str]]
    attempts = []  # type: List[Dict[str, Any]]
    while fields not in tried and len(tried) < 2 + len(_LEGACY):
        tried.append(fields)
        argv = [smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
        rc, out, err = run_command(argv, timeout=30)
        if rc == 0:
            try:
                devices = parse_gpu_csv(out, fields)
            except ValueError as exc:
                attempts.append({"fields": _variant(fields), "rc": rc, "error": str(exc)})
                break
            return {
                "count": len(devices),
                "fields": _variant(fields),
                "query": fields,
                "devices": devices,
                "failed_attempts": attempts,
            }
        message = _tail(out + "\n" + err)
        attempts.append({"fields": _variant(fields), "rc": rc, "error": message})
        if "not a valid field" not in message:
            break  # no devices, driver not loaded...: other names will not help
        match = _INVALID_FIELD.search(message)
        bad = match.group(1) if match else None
        if bad in swap:
            fields = [swap[bad] if f == bad else f for f in fields]
        else:  # a message we cannot place: try every old name at once
            fields = [_LEGACY.get(f, f) for f in GPU_FIELDS]
    raise Absent(
        "nvidia-smi --query-gpu failed: %s"
        % "; ".join("%s (rc %s): %s" % (a["fields"], a["rc"], a["error"]) for a in attempts)
    )


def _compute_apps(smi: str) -> List[Dict[str, Any]]:
    argv = [
        smi,
        "--query-compute-apps=pid,process_name,used_memory",
        "--format=csv,noheader,nounits",
    ]
    rc, out, err = run_command(argv, timeout=30)
    if rc != 0:
        raise Absent("nvidia-smi --query-compute-apps failed (rc %d): %s" % (rc, _tail(out + err)))
    return parse_compute_apps(out)


def _topo(smi: str) -> Dict[str, Any]:
    rc, out, err = run_command([smi, "topo", "-m"], timeout=30)
    if rc != 0:
        raise Absent("nvidia-smi topo -m failed (rc %d): %s" % (rc, _tail(out + err)))
    result = {"text": out}  # type: Dict[str, Any]
    try:
        result.update(parse_topo(out))
    except (ValueError, IndexError) as exc:
        result["parse_error"] = str(exc)
    return result


def _smi_header(smi: str) -> Dict[str, Any]:
    rc, out, err = run_command([smi], timeout=30)
    if rc != 0:
        raise Absent("nvidia-smi failed (rc %d): %s" % (rc, _tail(out + err)))
    header = parse_smi_header(out)
    if header["driver_version"] is None and header["cuda_version"] is None:
        raise Absent(
            "no 'Driver Version'/'CUDA Version' in nvidia-smi output: %s" % _tail(out, 200)
        )
    return dict(header)


def _nvcc() -> Dict[str, Any]:
    path = shutil.which("nvcc")
    if path is None:
        for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if base and os.access(os.path.join(base, "bin", "nvcc"), os.X_OK):
                path = os.path.join(base, "bin", "nvcc")
                break
    if path is None:
        raise Absent("nvcc not found on PATH, $CUDA_HOME or /usr/local/cuda")
    rc, out, err = run_command([path, "--version"], timeout=20)
    if rc != 0:
        raise Absent("nvcc --version failed (rc %d): %s" % (rc, _tail(out + err)))
    info = dict(parse_nvcc_version(out))  # type: Dict[str, Any]
    info["path"] = path
    return info


_PYTHON_INFO = (
    "import json, platform, sys; print(json.dumps({'executable': sys.executable, "
    "'version': platform.python_version(), 'implementation': platform.python_implementation(), "
    "'prefix': sys.prefix}))"
)
_TORCH_INFO = r"""
import json
out = {}
try:
    import torch
    out["version"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda
    out["debug"] = bool(getattr(torch.version, "debug", False))
    try:
        v = torch.cuda.nccl.version()
        if isinstance(v, tuple):
            out["nccl"] = ".".join(str(x) for x in v)
        elif isinstance(v, int):
            # NCCL_VERSION_CODE: major*10000+minor*100+patch since 2.9, major*1000+... before
            big = v >= 10000
            major, rest = divmod(v, 10000 if big else 1000)
            out["nccl"] = "%d.%d.%d" % (major, rest // 100, rest % 100)
        else:
            out["nccl"] = str(v)
    except Exception as exc:
        out["nccl_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


def _json_from_python(python: str, code: str, timeout: float, what: str) -> Dict[str, Any]:
    rc, out, err = run_command([python, "-c", code], timeout=timeout)
    if rc != 0:
        raise Absent("%s failed (rc %d): %s" % (what, rc, _tail(err or out)))
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise Absent("%s printed no JSON: %s" % (what, _tail(out + err)))
    data = json.loads(lines[-1])
    if not isinstance(data, dict):
        raise Absent("%s printed %r" % (what, data))
    return data


def _python(python: str) -> Dict[str, Any]:
    info = _json_from_python(python, _PYTHON_INFO, 20, "%s -c <version>" % python)
    info["requested"] = python
    return info


def _torch(python: str) -> Dict[str, Any]:
    info = _json_from_python(python, _TORCH_INFO, 60, "%s -c 'import torch'" % python)
    if "error" in info and "version" not in info:
        raise Absent("torch not importable by %s: %s" % (python, info["error"]))
    return info


def _pip_freeze(python: str) -> List[str]:
    rc, out, err = run_command([python, "-m", "pip", "freeze", "--all"], timeout=30)
    if rc != 0:
        raise Absent("%s -m pip freeze failed (rc %d): %s" % (python, rc, _tail(err or out)))
    return sorted((ln.strip() for ln in out.splitlines() if ln.strip()), key=str.lower)


def _server_log_nccl(server_log: str) -> Dict[str, Any]:
    try:
        with open(server_log, encoding="utf-8", errors="replace") as fh:
            versions = find_nccl_versions(fh)
    except OSError as exc:
        raise Absent("cannot read %s: %s" % (server_log, exc.strerror or exc)) from None
    if not versions:
        raise Absent("no 'NCCL version' line in %s" % server_log)
    return {"version": versions[0], "all": versions, "log": server_log}


def _git(repo_dir: str) -> Dict[str, Any]:
    if not os.path.isdir(repo_dir):
        raise Absent("%s is not a directory" % repo_dir)
    _which("git")

    def git(*args: str) -> Tuple[int, str, str]:
        # safe.directory: the repo may belong to another user; we only read it.
        return run_command(["git", "-c", "safe.directory=*", "-C", repo_dir, *args], timeout=20)

    rc, out, err = git("rev-parse", "HEAD")
    if rc != 0:
        raise Absent("git rev-parse HEAD failed in %s (rc %d): %s" % (repo_dir, rc, _tail(err)))
    info = {"path": os.path.abspath(repo_dir), "head": out.strip()}  # type: Dict[str, Any]
    for key, args in (
        ("describe", ("describe", "--tags", "--always", "--dirty")),
        ("branch", ("rev-parse", "--abbrev-ref", "HEAD")),
        ("remote_url", ("remote", "get-url", "origin")),
        ("head_subject", ("log", "-1", "--format=%s")),
        ("head_time", ("log", "-1", "--format=%cI")),
    ):
        rc, out, err = git(*args)
        info[key] = out.strip() if rc == 0 else None
    rc, out, err = git("status", "--porcelain")
    if rc == 0:
        info["status_porcelain"] = out.splitlines()
        info["dirty"] = bool(out.strip())
    else:
        info["status_porcelain"] = {"absent": _tail(err)}
        info["dirty"] = None
    return info


# --- assembly -------------------------------------------------------------------------------


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Absent as exc:
        return {"absent": str(exc)}
    except Exception as exc:  # a probe must never fail a cell: record and go on
        return {"absent": "error: %s: %s" % (type(exc).__name__, exc)}


def _pick(item: Any, key: str) -> Any:
    if isinstance(item, dict) and "absent" not in item:
        return item.get(key)
    return None


def snapshot(
    repo_dir: Optional[str] = None,
    python: Optional[str] = None,
    server_log: Optional[str] = None,
    pip_freeze: bool = True,
    topo: bool = True,
) -> Dict[str, Any]:
    """Take one snapshot of this host; never raises. See the module docstring for the shape.

    `python` is the interpreter that runs the server (default: this one); `repo_dir` the pinned
    repo; `server_log` a log to read the `NCCL version` line from.
    """
    started = time.time()
    py = python or sys.executable
    repo = repo_dir or ""
    log = server_log or ""
    smi = shutil.which("nvidia-smi")

    def need_smi() -> str:
        if smi is None:
            raise Absent("nvidia-smi not found on PATH")
        return smi

    def disabled(what: str) -> Callable[[], Any]:
        def fn() -> Any:
            raise Absent("disabled (snapshot.%s: false)" % what)

        return fn

    def not_given(what: str) -> Callable[[], Any]:
        def fn() -> Any:
            raise Absent("no %s given" % what)

        return fn

    items = {
        "hostname": socket.gethostname,
        "kernel": _kernel,
        "os": _os,
        "cpu": _cpu,
        "memory": lambda: parse_meminfo(_read("/proc/meminfo")),
        "load": lambda: parse_loadavg(_read("/proc/loadavg")),
        "nvidia_smi": lambda: _smi_header(need_smi()),
        "gpus": lambda: _gpus(need_smi()),
        "compute_apps": lambda: _compute_apps(need_smi()),
        "topo": (lambda: _topo(need_smi())) if topo else disabled("topo"),
        "nvcc": _nvcc,
        "python": lambda: _python(py),
        "torch": lambda: _torch(py),
        "pip_freeze": (lambda: _pip_freeze(py)) if pip_freeze else disabled("pip_freeze"),
        "git": (lambda: _git(repo)) if repo else not_given("repo"),
        "server_log_nccl": (lambda: _server_log_nccl(log)) if log else not_given("server log"),
        "env": lambda: collect_env(os.environ),
    }  # type: Dict[str, Callable[[], Any]]
    # Items are independent and mostly wait on subprocesses: run them side by side.
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {name: pool.submit(_guard, fn) for name, fn in items.items()}
        results = {name: f.result() for name, f in futures.items()}

    torch_info = results["torch"]
    header = results["nvidia_smi"]
    gpus = results["gpus"]
    driver = _pick(header, "driver_version")
    if driver is None and isinstance(gpus, dict) and gpus.get("devices"):
        driver = gpus["devices"][0].get("driver_version")
    snap = {
        "schema_version": SCHEMA_VERSION,
        "taken_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "taken_at_epoch": round(started, 3),
    }  # type: Dict[str, Any]
    snap.update(results)
    snap["driver"] = {"version": driver}
    snap["cuda"] = {
        "driver": _pick(header, "cuda_version"),
        "nvcc": _pick(results["nvcc"], "version"),
        "torch": _pick(torch_info, "cuda"),
    }
    snap["nccl"] = {
        "torch": _pick(torch_info, "nccl"),
        "server_log": _pick(results["server_log_nccl"], "version"),
    }
    snap["probe"] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "seconds": round(time.time() - started, 3),
    }
    return snap


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python3 probe.py [--repo DIR] [--python PY] [--server-log FILE]`: print one snapshot."""
    import argparse

    parser = argparse.ArgumentParser(description="Print a JSON snapshot of this host.")
    parser.add_argument("--repo", help="git repository whose state to record")
    parser.add_argument("--python", help="interpreter that runs the server (torch, pip freeze)")
    parser.add_argument("--server-log", help="server log to read the 'NCCL version' line from")
    parser.add_argument("--no-pip-freeze", action="store_true", help="skip pip freeze")
    parser.add_argument("--no-topo", action="store_true", help="skip nvidia-smi topo -m")
    args = parser.parse_args(argv)
    snap = snapshot(
        repo_dir=args.repo,
        python=args.python,
        server_log=args.server_log,
        pip_freeze=not args.no_pip_freeze,
        topo=not args.no_topo,
    )
    sys.stdout.write(json.dumps(snap, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
