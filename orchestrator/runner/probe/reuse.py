"""What a host answered that changes only with its hardware or its tools, kept for a runner's
later snapshots: the GPU topology, the nvidia-smi header, nvcc's version.

Within one runner (a host's queue of cells) an answer is reused while a cheap check says nothing
it rests on changed: the tool's file (path, inode, mtime), and for the GPU items the devices'
identity (UUID, PCI bus id, driver version) from the `gpus` query every snapshot still makes.
An answer is never older than `MAX_AGE` seconds, so a link that goes down without any of that
changing is seen within minutes. The snapshot lists what it reused (`probe.reused`) and records
each item whole, reused or not.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, Optional, Tuple

MAX_AGE = 600.0
_KEPT: Dict[str, Tuple[Any, float, Any]] = {}
_LOCK = threading.Lock()


def file_key(path: Optional[str]) -> Any:
    """(path, inode, mtime) of a tool, or None when there is none."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_ino, st.st_mtime_ns)


def gpu_key(gpus: Any) -> Any:
    """The devices' identity and driver from a `gpus` item, or None when it has none."""
    devices = gpus.get("devices") if isinstance(gpus, dict) else None
    if not isinstance(devices, list) or not devices:
        return None
    out = []
    for d in devices:
        if not isinstance(d, dict):
            return None
        out.append(
            (d.get("uuid"), d.get("pci.bus_id", d.get("pci_bus_id")), d.get("driver_version"))
        )
    return tuple(out)


def kept(item: str, key: Any) -> Any:
    """The answer kept for `item` when its key is `key` and it is young enough, else None."""
    if key is None:
        return None
    with _LOCK:
        entry = _KEPT.get(item)
    if entry is None or entry[0] != key or time.monotonic() - entry[1] > MAX_AGE:
        return None
    return entry[2]


def holds(item: str) -> bool:
    """Whether an answer is kept for `item` (whatever its key): worth checking before running."""
    with _LOCK:
        entry = _KEPT.get(item)
    return entry is not None and time.monotonic() - entry[1] <= MAX_AGE


def keep(item: str, key: Any, answer: Any) -> None:
    """Keep a real answer (not an absent one) for `item` under `key`."""
    if key is None or (isinstance(answer, dict) and "absent" in answer):
        return
    with _LOCK:
        _KEPT[item] = (key, time.monotonic(), answer)


def forget() -> None:
    """Drop every kept answer (tests)."""
    with _LOCK:
        _KEPT.clear()
