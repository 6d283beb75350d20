"""A fake `nvidia-smi` that reads the simulated host state (see `state.py`).

It answers the queries of the probe, preflight and telemetry; its rules: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.sim import model as m
from orchestrator.sim import state as st

Row = dict[str, Any]
_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def _bus_id(row: Row) -> str:
    i = int(row["index"])
    return f"00000000:{_BUS[i % len(_BUS)]}:00.0" if i < len(_BUS) else f"00000000:{i:02X}:00.0"


def _uuid(row: Row) -> str:
    h = hashlib.sha256(f"{row['gpu_name']}-{row['index']}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _mem_used(row: Row, apps: list[Row]) -> int:
    held = sum(int(a["used_memory_mib"]) for a in apps if int(a["gpu"]) == int(row["index"]))
    return int(row["memory_used_mib"]) + held


# name -> (unit, value(row, apps)); the header shows `name [unit]`.
_Getter = Callable[[Row, list[Row]], Any]
_FIELDS: dict[str, tuple[str, _Getter]] = {
    "index": ("", lambda r, a: r["index"]),
    "count": ("", lambda r, a: r["gpu_count"]),
    "name": ("", lambda r, a: r["gpu_name"]),
    "uuid": ("", lambda r, a: _uuid(r)),
    "serial": ("", lambda r, a: f"16542240{int(r['index']):05d}"),
    "driver_version": ("", lambda r, a: r["driver_version"]),
    "vbios_version": ("", lambda r, a: "96.00.A5.00.01"),
    "pci.bus_id": ("", lambda r, a: _bus_id(r)),
    "pstate": ("", lambda r, a: r["pstate"]),
    "compute_cap": ("", lambda r, a: r["compute_cap"]),
    "clocks.current.sm": ("MHz", lambda r, a: r["sm_clock"]),
    "clocks.current.graphics": ("MHz", lambda r, a: r["sm_clock"]),
    "clocks.current.memory": ("MHz", lambda r, a: r["mem_clock"]),
    "clocks.max.sm": ("MHz", lambda r, a: r["max_sm_clock"]),
    "clocks.max.graphics": ("MHz", lambda r, a: r["max_sm_clock"]),
    "clocks.max.memory": ("MHz", lambda r, a: r["max_mem_clock"]),
    "pcie.link.gen.gpucurrent": ("", lambda r, a: r["pcie_gen"]),
    "pcie.link.gen.current": ("", lambda r, a: r["pcie_gen"]),
    "pcie.link.gen.max": ("", lambda r, a: r["pcie_max_gen"]),
    "pcie.link.gen.gpumax": ("", lambda r, a: r["pcie_max_gen"]),
    "pcie.link.width.current": ("", lambda r, a: r["pcie_width"]),
    "pcie.link.width.max": ("", lambda r, a: r["pcie_max_width"]),
    "power.draw": ("W", lambda r, a: f"{float(r['power_draw']):.2f}"),
    "power.limit": ("W", lambda r, a: f"{float(r['power_limit']):.2f}"),
    "enforced.power.limit": ("W", lambda r, a: f"{float(r['power_limit']):.2f}"),
    "power.default_limit": ("W", lambda r, a: f"{float(r['power_limit']):.2f}"),
    "power.max_limit": ("W", lambda r, a: f"{float(r['power_limit']):.2f}"),
    "temperature.gpu": ("", lambda r, a: r["temperature"]),
    "memory.total": ("MiB", lambda r, a: r["memory_total_mib"]),
    "memory.used": ("MiB", lambda r, a: _mem_used(r, a)),
    "memory.free": ("MiB", lambda r, a: int(r["memory_total_mib"]) - _mem_used(r, a)),
    "utilization.gpu": ("%", lambda r, a: r["utilization"]),
    "utilization.memory": ("%", lambda r, a: r["utilization"]),
    "persistence_mode": ("", lambda r, a: r["persistence_mode"]),
    "ecc.mode.current": ("", lambda r, a: r["ecc_mode"]),
    "ecc.mode.pending": ("", lambda r, a: r["ecc_mode"]),
    "fan.speed": ("%", lambda r, a: "[N/A]"),
    "clocks_event_reasons.active": ("", lambda r, a: r["throttle_reasons"]),
    "clocks_throttle_reasons.active": ("", lambda r, a: r["throttle_reasons"]),
}
_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
    "clocks.sm": "clocks.current.sm",
    "clocks.gr": "clocks.current.graphics",
    "clocks.mem": "clocks.current.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "clocks_event_reasons.active": "clocks_event_reasons.active",
}
_NEW_ONLY = {"clocks_event_reasons.active", "pcie.link.gen.gpucurrent", "pcie.link.gen.gpumax"}
_OLD_ONLY = {"clocks_throttle_reasons.active", "pcie.link.gen.current"}

_APP_FIELDS: dict[str, tuple[str, Callable[[Row, Row], Any]]] = {
    "pid": ("", lambda app, g: app["pid"]),
    "process_name": ("", lambda app, g: app["process_name"]),
    "name": ("", lambda app, g: app["process_name"]),
    "used_memory": ("MiB", lambda app, g: app["used_memory_mib"]),
    "used_gpu_memory": ("MiB", lambda app, g: app["used_memory_mib"]),
    "gpu_uuid": ("", lambda app, g: _uuid(g)),
    "gpu_bus_id": ("", lambda app, g: _bus_id(g)),
    "gpu_name": ("", lambda app, g: g["gpu_name"]),
}


class SmiError(Exception):
    """A usage error: the message and the exit status the real tool uses."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _resolve(name: str, generation: str) -> str:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    bad = (generation == "old" and key in _NEW_ONLY) or (generation == "new" and key in _OLD_ONLY)
    if key not in _FIELDS or bad:
        raise SmiError(f'Field "{name.strip()}" is not a valid field to query.\n')
    return key


def query_gpu(
    state: Row, fields: list[str], fmt: set[str], ids: list[int] | None, apps: list[Row]
) -> str:
    """CSV rows for `--query-gpu` (one per GPU, in index order)."""
    generation = str(state.get("nvidia_smi_fields", "both"))
    keys = [_resolve(f, generation) for f in fields if f.strip()]
    if not keys:
        raise SmiError("No fields specified for --query-gpu.\n")
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(k + (f" [{_FIELDS[k][0]}]" if _FIELDS[k][0] else "") for k in keys))
    for row in m.gpu_rows(state):
        if ids is not None and int(row["index"]) not in ids:
            continue
        values = []
        for k in keys:
            unit, get = _FIELDS[k]
            value = str(get(row, apps))
            if unit and "nounits" not in fmt and not value.startswith("["):
                value = f"{value} {unit}"
            values.append(value)
        lines.append(", ".join(values))
    return "\n".join(lines) + "\n"


def query_apps(state: Row, fields: list[str], fmt: set[str], apps: list[Row]) -> str:
    """CSV rows for `--query-compute-apps` (processes registered by running sim servers)."""
    keys = []
    for f in fields:
        key = f.strip().lower()
        if key not in _APP_FIELDS:
            raise SmiError(f'Field "{f.strip()}" is not a valid field to query.\n')
        keys.append(key)
    gpus = {int(r["index"]): r for r in m.gpu_rows(state)}
    lines = []
    if "noheader" not in fmt:
        lines.append(
            ", ".join(k + (f" [{_APP_FIELDS[k][0]}]" if _APP_FIELDS[k][0] else "") for k in keys)
        )
    for app in apps:
        gpu = gpus.get(int(app["gpu"]), next(iter(gpus.values())))
        values = []
        for k in keys:
            unit, get = _APP_FIELDS[k]
            value = str(get(app, gpu))
            values.append(f"{value} {unit}" if unit and "nounits" not in fmt else value)
        lines.append(", ".join(values))
    return "\n".join(lines) + ("\n" if lines else "")


def topo(state: Row) -> str:
    """`nvidia-smi topo -m`: NVLink between all GPUs, four NICs, two NUMA nodes."""
    n = int(state["gpu_count"])
    nics = [f"NIC{i}" for i in range(4)]
    names = [f"GPU{i}" for i in range(n)] + nics
    header = "\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    lines = [header]
    half = max(1, n // 2)
    for i, name in enumerate(names):
        cells = []
        for j, _ in enumerate(names):
            if i == j:
                cells.append(" X ")
            elif i < n and j < n:
                cells.append("NV18")
            else:
                gi = i if i < n else (i - n) * max(1, n // 4)
                gj = j if j < n else (j - n) * max(1, n // 4)
                cells.append(
                    "PIX"
                    if gi // max(1, n // 4) == gj // max(1, n // 4)
                    else ("NODE" if gi // half == gj // half else "SYS")
                )
        tail = ""
        if i < n:
            numa = i // half
            cpus = f"{numa * 48}-{numa * 48 + 47},{numa * 48 + 96}-{numa * 48 + 143}"
            tail = f"\t{cpus}\t{numa}\t\tN/A"
        lines.append(name + "\t" + "\t".join(cells) + tail)
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA "
        "nodes (e.g., QPI/UPI)",
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
        "Bridges within a NUMA node",
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe "
        "Host Bridge)",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
        "",
        "NIC Legend:",
        "",
    ]
    lines += [f"  NIC{i}: mlx5_{i}" for i in range(4)]
    return "\n".join(lines) + "\n"


def overview(state: Row, apps: list[Row]) -> str:
    """Bare `nvidia-smi`: the header box with versions, one block per GPU, the process list."""
    rule = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    out = [time.strftime("%a %b %d %H:%M:%S %Y"), "+" + "-" * 89 + "+"]
    head = (
        f"NVIDIA-SMI {state['driver_version']:<22}Driver Version: {state['driver_version']:<15}"
        f"CUDA Version: {state['cuda_version']}"
    )
    out.append(f"| {head:<87} |")
    out += [
        rule,
        "| GPU  Name                 Persistence-M | B"
        "us-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |  "
        "         Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |  "
        "                      |               MIG M. |",
        rule.replace("-", "="),
    ]
    for row in m.gpu_rows(state):
        persist = "On" if str(row["persistence_mode"]).lower() in {"enabled", "on"} else "Off"
        name = str(row["gpu_name"])[:24]
        out.append(
            f"| {int(row['index']):>3}  {name:<24}{persist:>9}  |   {_bus_id(row)} Off |{'0':>21} |"
        )
        power = f"{float(row['power_draw']):.0f}W / {float(row['power_limit']):.0f}W"
        mem = f"{_mem_used(row, apps)}MiB / {row['memory_total_mib']}MiB"
        out.append(
            f"| N/A  {int(row['temperature']):>3}C    {row['pstate']:<4}{power:>22} |"
            f"{mem:>23} |{str(row['utilization']) + '%':>8}      Default |"
        )
        out.append(f"|{'':41}|{'':24}|{'Disabled':>21} |")
        out.append(rule)
    out += [
        "",
        "+" + "-" * 89 + "+",
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI              PID   Type   Pr"
        "ocess name                        GPU Memory |",
        "|        ID   ID                             "
        "                                  Usage      |",
        "|" + "=" * 89 + "|",
    ]
    if not apps:
        out.append("|  No running processes found" + " " * 61 + "|")
    for app in apps:
        out.append(
            f"|  {int(app['gpu']):>3}   N/A  N/A  {int(app['pid']):>14}      C   "
            f"{str(app['process_name'])[:34]:<34}{int(app['used_memory_mib']):>9}MiB |"
        )
    out.append("+" + "-" * 89 + "+")
    return "\n".join(out) + "\n"


def _option(args: list[str], i: int) -> tuple[str, str | None, int]:
    arg = args[i]
    if "=" in arg and arg.startswith("-"):
        name, value = arg.split("=", 1)
        return name, value, i + 1
    return arg, (args[i + 1] if i + 1 < len(args) else None), i + 2


def run(args: list[str], state: Row, apps: list[Row]) -> str:
    """The text nvidia-smi prints for `args`; raises SmiError for usage errors."""
    if args[:1] == ["topo"]:
        if "-m" in args or "--matrix" in args:
            return topo(state)
        raise SmiError(
            "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
        )
    if args in (["-L"], ["--list-gpus"]):
        return "".join(
            f"GPU {r['index']}: {r['gpu_name']} (UUID: {_uuid(r)})\n" for r in m.gpu_rows(state)
        )
    query: tuple[str, list[str]] | None = None
    fmt: set[str] = set()
    ids: list[int] | None = None
    i = 0
    while i < len(args):
        name, value, nxt = _option(args, i)
        if name in {"--query-gpu", "--query-compute-apps"}:
            query = (name, (value or "").split(","))
            i = nxt
        elif name == "--format":
            fmt = {p.strip() for p in (value or "").split(",")}
            i = nxt
        elif name in {"-i", "--id"}:
            ids = [int(x) for x in (value or "").split(",") if x.strip().isdigit()]
            i = nxt
        else:
            raise SmiError(
                f'Invalid combination of input arguments. Please run "nvidia-smi -h" '
                f"for help. ({args[i]})\n"
            )
    if query is None:
        return overview(state, apps)
    if "csv" not in fmt:
        raise SmiError('"--format=" switch is missing. Please try again.\n')
    if query[0] == "--query-gpu":
        return query_gpu(state, query[1], fmt, ids, apps)
    return query_apps(state, query[1], fmt, apps)


# NVML's clock-event reason bits that an episode may name (nvml.h).
_REASON_BITS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}


def _reason_mask(reason: Any) -> int:
    text = str(reason).strip().lower()
    if text in _REASON_BITS:
        return _REASON_BITS[text]
    try:
        return int(text, 16)
    except ValueError as exc:
        raise ValueError(f"throttle episode: unknown reason {reason!r}") from exc


def _loaded_since(path: Path | None, apps: list[Row]) -> dict[int, float]:
    """GPU -> when its earliest live server process registered (the app file's mtime)."""
    since: dict[int, float] = {}
    for app in apps:
        entry = st.apps_dir(path) / f"{int(app['pid'])}.json" if path is not None else None
        try:
            t = entry.stat().st_mtime if entry is not None else time.time()
        except OSError:
            continue
        gpu = int(app["gpu"])
        since[gpu] = min(t, since.get(gpu, t))
    return since


def live_state(
    state: Row, apps: list[Row], now: float, path: Path | None, load: bool = True
) -> Row:
    """`state` with the scheduled throttle episodes active at `now` (and, with `load`, the power
    and utilisation of GPUs that hold a server) written as per-GPU overrides."""
    episodes = state.get("throttle_episodes") or []
    since = _loaded_since(path, apps)
    if not episodes and not (load and since):
        return state
    rows = {int(r["index"]): r for r in m.gpu_rows(state)}
    gpus: dict[str, dict[str, Any]] = {
        k: dict(v) for k, v in (state.get("gpus") or {}).items() if isinstance(v, dict)
    }
    for i, row in rows.items():
        over = gpus.setdefault(str(i), {})
        top = float(row["max_sm_clock"])
        mask = int(str(row["throttle_reasons"]), 16)
        clock, reasons = m.episode_clock(row, episodes, now, since.get(i))
        for reason in reasons:
            mask |= _reason_mask(reason)
        over["sm_clock"] = int(clock)
        over["throttle_reasons"] = f"0x{mask:016x}"
        if load and i in since:
            idle = float(row["power_draw"])
            busy = float(state.get("load_power_draw", 0.8 * float(row["power_limit"])))
            ratio = min(1.0, clock / top) if top > 0 else 1.0
            over["power_draw"] = idle + (busy - idle) * ratio
            over["utilization"] = int(state.get("load_utilization", 97))
    return {**state, "gpus": gpus}


def _split_loop(argv: list[str]) -> tuple[list[str], float | None]:
    """argv without the loop option, and the loop interval in seconds (None: run once)."""
    rest: list[str] = []
    interval: float | None = None
    i = 0
    while i < len(argv):
        name, value, nxt = _option(argv, i)
        if name in {"-lms", "--loop-ms", "-l", "--loop"}:
            try:
                number = float(value or "")
            except ValueError as exc:
                raise SmiError(f'Invalid value "{value}" for {name}.\n') from exc
            interval = max(0.001, number / 1000 if name in {"-lms", "--loop-ms"} else number)
            i = nxt
        else:
            rest.append(argv[i])
            i += 1
    return rest, interval


def _stream(argv: list[str], path: Path | None, interval: float) -> int:
    """Print the query every `interval` seconds until killed or stdout closes."""
    header = not any("noheader" in a for a in argv)
    tick = time.monotonic()
    first = True
    while True:
        apps = st.running_apps(path)
        state = live_state(st.read_state(path), apps, time.time(), path)
        text = run(argv, state, apps)
        if header and not first:
            text = text.split("\n", 1)[1] if "\n" in text else ""
        first = False
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away: end quietly, as the real tool dies of SIGPIPE.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        tick += interval
        time.sleep(max(0.0, tick - time.monotonic()))


def main(argv: list[str]) -> int:
    """Entry point for the fake `nvidia-smi`."""
    path = st.resolve_state_path()
    try:
        argv, interval = _split_loop(argv)
        if interval is not None:
            return _stream(argv, path, interval)
        apps = st.running_apps(path)
        state = live_state(st.read_state(path), apps, time.time(), path, load=False)
        sys.stdout.write(run(argv, state, apps))
    except SmiError as exc:
        sys.stdout.write(str(exc))
        return exc.code
    except (OSError, ValueError) as exc:
        sys.stdout.write(f"Failed to initialize NVML: {exc}\n")
        return 9
    return 0


def install_fake_nvidia_smi(bin_dir: Path, python: str, state: Path | None = None) -> Path:
    """Write an executable `nvidia-smi` in `bin_dir` that runs this module with `python`.

    With `state`, the script uses that state file unless $ORCH_SIM_STATE says otherwise.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    lines = ["#!/bin/sh", "# orch's simulated nvidia-smi (orchestrator/sim/smi.py)"]
    if state is not None:
        quoted = str(state).replace("'", "'\\''")
        lines.append(
            f"if [ -z \"${{ORCH_SIM_STATE:-}}\" ]; then ORCH_SIM_STATE='{quoted}'; "
            "export ORCH_SIM_STATE; fi"
        )
    quoted_py = python.replace("'", "'\\''")
    lines.append(f"exec '{quoted_py}' -m orchestrator.sim nvidia-smi \"$@\"")
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script
