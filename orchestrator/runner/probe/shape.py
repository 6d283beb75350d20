"""The declared shape of a snapshot: the keys the probe writes and every reader looks up.

Shared by the probe on the host and the controller's readers (`orch diff`, `audit`, `facts`),
so a key is spelled once. Host-side code: Python 3.8 syntax, standard library only
(annotations are never evaluated, so the modern spelling of types is safe on 3.8).
"""

from __future__ import annotations

SCHEMA_VERSION = 1  # a snapshot's own `schema_version`
ABSENT = "absent"  # an item that could not be collected: {"absent": "<reason>"}

# Top-level items of a snapshot.
GPUS = "gpus"  # {"count", "fields", "query", "devices": [...], "failed_attempts"} or absent
GPU_DEVICES = "devices"
PIP_FREEZE = "pip_freeze"  # sorted `pip freeze --all` lines
ENV = "env"  # {NAME: value} of the variables that shape serving, secrets redacted
TOPO = "topo"  # {"text", "devices", "links": {dev: {dev: link}}, "affinity": {dev: {...}}}
TOPO_LINKS = "links"
TOPO_AFFINITY = "affinity"
GIT = "git"  # {"path", "head", "describe", "branch", "remote_url", "dirty", "status_porcelain"}
COMPUTE_APPS = "compute_apps"  # [{"pid", "process_name", "used_memory_mib"}]: GPU processes
PYTHON = "python"  # {"executable", "version", "implementation", "prefix", "requested"}
# The Slurm job the snapshot was taken in (probe_slurm.slurm_facts), absent outside one:
# {"job_id", "partition", "nodes", "node_id", "time_limit", "gres", "gres_granted",
#  "gres_by_node": {nodes: "gpu:2(IDX:0-1)"}, "gpus": {var: value}, "env", "scontrol"}
SLURM = "slurm"
SLURM_GRES_BY_NODE = "gres_by_node"  # a key of the slurm item
# What a run's allocation was, compared by `orch diff` (job ids differ in every run: not here).
SLURM_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Slurm partition", (SLURM, "partition")),
    ("Slurm account", (SLURM, "account")),
    ("Slurm QOS", (SLURM, "qos")),
    ("Slurm nodes", (SLURM, "nodes")),
    ("Slurm time limit", (SLURM, "time_limit")),
    ("Slurm gres requested", (SLURM, "gres")),
    ("Slurm gres granted", (SLURM, "gres_granted")),
)

# Labelled single readings: (label, path of keys from the snapshot's top level).
SYSTEM_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("driver", ("driver", "version")),
    ("CUDA (driver supports)", ("cuda", "driver")),
    ("CUDA (nvcc)", ("cuda", "nvcc")),
    ("CUDA (torch)", ("cuda", "torch")),
    ("NCCL (torch)", ("nccl", "torch")),
    ("torch", ("torch", "version")),
    ("kernel", ("kernel", "release")),
    ("os", ("os", "PRETTY_NAME")),  # /etc/os-release as is
    ("python", ("python", "version")),
    ("python executable", ("python", "executable")),
    ("CPU", ("cpu", "model")),
    ("CPU count", ("cpu", "count")),
)
OS_NAME = ("os", "NAME")  # when os-release has no PRETTY_NAME
NCCL_SERVER_LOG = ("nccl", "server_log")  # the `NCCL version` the server logged
LOAD_1M = ("load", "1m")  # /proc/loadavg's 1-minute average (`probe_parse.parse_loadavg`)
CPU_COUNT = ("cpu", "count")

# One GPU device: keyed by the newest nvidia-smi field names, whatever names were queried.
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
# newest name -> the name drivers before ~535.113 know
LEGACY_GPU_FIELDS = {
    "pcie.link.gen.gpucurrent": "pcie.link.gen.current",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
}
REASON_FIELD = "clocks_event_reasons.active"  # the NVML bitmask as nvidia-smi prints it: 0x...
REASON_NAMES_FIELD = "clocks_event_reasons.names"  # the probe's decoding of it
UNAVAILABLE_FIELD = "unavailable"  # {field: "[Not Supported]" | "[N/A]" ...}

# NVML's clocks event (formerly "throttle") reason bits, nvml.h nvmlClocksEventReason*, lowest
# first; the snapshot names them in snake case, `nvml_name()` gives NVML's own spelling.
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
KNOWN_REASON_BITS = sum(bit for bit, _ in CLOCK_EVENT_REASONS)


def nvml_name(reason: str) -> str:
    """`hw_thermal_slowdown` -> `HwThermalSlowdown` (nvmlClocksEventReason...)."""
    return "".join(part.capitalize() for part in reason.split("_"))


def decode_clock_event_reasons(mask: str | None) -> list[str] | None:
    """`0x...48` -> ["hw_slowdown", "hw_thermal_slowdown"]; unknown bits as `bit_0x...`."""
    if mask is None:
        return None
    try:
        value = int(mask, 16)
    except ValueError:
        return None
    names = [name for bit, name in CLOCK_EVENT_REASONS if value & bit]
    rest = value & ~KNOWN_REASON_BITS
    bit = 1
    while rest:
        if rest & bit:
            names.append("bit_" + hex(bit))
            rest &= ~bit
        bit <<= 1
    return names
