"""The snapshot's GPU items, from nvidia-smi: the devices (every field, asked again with a
field's other spelling when a driver rejects it), the compute apps, who holds each GPU now (for
preflight), the topology matrix and the driver/CUDA header.

Host-side code (Python 3.8, standard library only).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence

from orchestrator.runner.probe.parse import (
    GPU_FIELDS,
    LEGACY_FIELDS,
    parse_compute_apps,
    parse_gpu_apps,
    parse_gpu_csv,
    parse_smi_header,
    parse_topo,
    short_tail,
)
from orchestrator.runner.probe.tools import Absent, run_command

_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field')


def _variant(fields: Sequence[str]) -> str:
    if list(fields) == list(GPU_FIELDS):
        return "current"
    if list(fields) == [LEGACY_FIELDS.get(f, f) for f in GPU_FIELDS]:
        return "legacy"
    return "mixed"


def query_gpus(smi: str) -> Dict[str, Any]:
    """Query every field; on a rejected name swap it for its other spelling and ask again."""
    swap = dict(LEGACY_FIELDS)
    swap.update((old, new) for new, old in LEGACY_FIELDS.items())
    fields = list(GPU_FIELDS)
    tried = []  # type: List[List[str]]
    attempts = []  # type: List[Dict[str, Any]]
    while fields not in tried and len(tried) < 2 + len(LEGACY_FIELDS):
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
        message = short_tail(out + "\n" + err)
        attempts.append({"fields": _variant(fields), "rc": rc, "error": message})
        if "not a valid field" not in message:
            break  # no devices, driver not loaded...: other names will not help
        match = _INVALID_FIELD.search(message)
        bad = match.group(1) if match else None
        if bad in swap:
            fields = [swap[bad] if f == bad else f for f in fields]
        else:  # a message we cannot place: try every old name at once
            fields = [LEGACY_FIELDS.get(f, f) for f in GPU_FIELDS]
    raise Absent(
        "nvidia-smi --query-gpu failed: %s"
        % "; ".join("%s (rc %s): %s" % (a["fields"], a["rc"], a["error"]) for a in attempts)
    )


def _csv_query(smi: str, query: str, fields: str) -> str:
    """`nvidia-smi --query-<query>=<fields>` as bare CSV; Absent when nvidia-smi fails."""
    argv = [smi, "--query-%s=%s" % (query, fields), "--format=csv,noheader,nounits"]
    rc, out, err = run_command(argv, timeout=30)
    if rc != 0:
        raise Absent(
            "nvidia-smi --query-%s failed (rc %d): %s" % (query, rc, short_tail(out + err))
        )
    return out


def compute_apps(smi: str) -> List[Dict[str, Any]]:
    """The processes nvidia-smi lists on the GPUs: pid, name, memory used."""
    return parse_compute_apps(_csv_query(smi, "compute-apps", "pid,process_name,used_memory"))


def gpu_occupancy(smi: str) -> Dict[str, Any]:
    """Who holds the GPUs now: {"gpus": [{index, uuid, memory_used_mib}], "apps": [{pid,
    process_name, used_memory_mib, gpu}]}, each app's GPU as an index. Absent when nvidia-smi
    cannot answer."""
    gpus = parse_gpu_csv(
        _csv_query(smi, "gpu", "index,uuid,memory.used"), ["index", "uuid", "memory.used"]
    )
    by_uuid = {str(g.get("uuid")): g.get("index") for g in gpus}
    out = _csv_query(smi, "compute-apps", "gpu_uuid,pid,used_memory,process_name")
    apps = []
    for app in parse_gpu_apps(out):
        uuid = app.pop("gpu_uuid")
        app["gpu"] = by_uuid.get(uuid, uuid)
        apps.append(app)
    return {
        "gpus": [
            {
                "index": g.get("index"),
                "uuid": g.get("uuid"),
                "memory_used_mib": g.get("memory.used"),
            }
            for g in gpus
        ],
        "apps": apps,
    }


def query_topo(smi: str) -> Dict[str, Any]:
    rc, out, err = run_command([smi, "topo", "-m"], timeout=30)
    if rc != 0:
        raise Absent("nvidia-smi topo -m failed (rc %d): %s" % (rc, short_tail(out + err)))
    result = {"text": out}  # type: Dict[str, Any]
    try:
        result.update(parse_topo(out))
    except (ValueError, IndexError) as exc:
        result["parse_error"] = str(exc)
    return result


def smi_header(smi: str) -> Dict[str, Any]:
    rc, out, err = run_command([smi], timeout=30)
    if rc != 0:
        raise Absent("nvidia-smi failed (rc %d): %s" % (rc, short_tail(out + err)))
    header = parse_smi_header(out)
    if header["driver_version"] is None and header["cuda_version"] is None:
        raise Absent(
            "no 'Driver Version'/'CUDA Version' in nvidia-smi output: %s" % short_tail(out, 200)
        )
    return dict(header)
