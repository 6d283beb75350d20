"""The simulated host's state file, shared by `sim serve` and the fake `nvidia-smi`.

`$ORCH_SIM_STATE` names a JSON file (GPU clocks, PCIe, power, versions, throttle reasons; see
`model.DEFAULT_STATE`); without it `~/.orch_sim_state.json` is used when present, else defaults.
Running servers register their worker processes in `<state>.apps/<pid>.json`, which the fake
`nvidia-smi --query-compute-apps` lists while those processes are alive.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.sim.model import DEFAULT_STATE, host_state

STATE_ENV = "ORCH_SIM_STATE"
# Optional keys beyond `DEFAULT_STATE`, read by the fake nvidia-smi's `-lms` stream (see smi.py):
# `throttle_episodes` [{at|after_load, duration, reason, sm_clock, gpus}], `load_power_draw` (W),
# `load_utilization` (%); and by `sim serve` alone (nvidia-smi cannot see a busy CPU):
# `contention_episodes` [{after_requests, requests | after_load_s, duration_s; slowdown}].
OPTIONAL_KEYS = frozenset(
    {"throttle_episodes", "load_power_draw", "load_utilization", "contention_episodes"}
)


def resolve_state_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The state file to read: explicit, $ORCH_SIM_STATE, ~/.orch_sim_state.json, or None."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    home = Path.home() / ".orch_sim_state.json"
    return home if home.exists() else None


def read_state(path: Path | None) -> dict[str, Any]:
    """The host state with defaults for everything the file does not say (or when it is absent)."""
    if path is None or not path.exists():
        return host_state()
    data = json.loads(path.read_text() or "{}")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: host state must be a JSON object")
    return host_state(data)


def write_host_state(path: str | os.PathLike[str], **overrides: Any) -> Path:
    """Write a full host state file (defaults + `overrides`, e.g. sm_clock=1200) atomically."""
    target = Path(path)
    unknown = set(overrides) - set(DEFAULT_STATE) - OPTIONAL_KEYS
    if unknown:
        raise ValueError(f"unknown host state keys: {sorted(unknown)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(host_state(overrides), indent=2) + "\n")
    tmp.replace(target)
    return target


def apps_dir(path: Path) -> Path:
    """Where running simulated servers register their GPU processes."""
    return path.with_name(path.name + ".apps")


def register_app(path: Path | None, pid: int, gpu: int, used_mib: int, name: str) -> None:
    """Record that `pid` holds `used_mib` MiB on GPU `gpu` (ignored without a state file)."""
    if path is None:
        return
    folder = apps_dir(path)
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"pid": pid, "gpu": gpu, "used_memory_mib": used_mib, "process_name": name}
    (folder / f"{pid}.json").write_text(json.dumps(entry))


def unregister_app(path: Path | None, pid: int) -> None:
    """Forget a process registered by `register_app`."""
    if path is not None:
        (apps_dir(path) / f"{pid}.json").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0): treat it as gone, as the GPU memory is freed.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def running_apps(path: Path | None) -> list[dict[str, Any]]:
    """Registered processes that are still alive, by pid."""
    if path is None or not apps_dir(path).is_dir():
        return []
    apps = []
    for entry in sorted(apps_dir(path).glob("*.json")):
        try:
            app = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(app, dict) and _alive(int(app.get("pid", 0))):
            apps.append(app)
    return sorted(apps, key=lambda a: (int(a.get("gpu", 0)), int(a["pid"])))


def next_start(path: Path | None) -> int:
    """Count one more server start on this host and return its number (from 1): kept in
    `<state>.starts` beside the state file, else in the temp folder, under an flock."""
    counter = (
        path.with_name(path.name + ".starts")
        if path is not None
        else Path(tempfile.gettempdir()) / f"orch_sim_starts.{os.getuid()}"
    )
    counter.parent.mkdir(parents=True, exist_ok=True)
    with open(counter, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        text = fh.read().strip()
        number = (int(text) if text.isdigit() else 0) + 1
        fh.seek(0)
        fh.truncate()
        fh.write(f"{number}\n")
        fh.flush()
    return number
