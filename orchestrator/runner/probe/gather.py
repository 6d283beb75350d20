"""The snapshot probe: what a host looked like at one moment, as one JSON object.

Runs under the host's own python3 (3.8 or newer) inside runner.pyz: `snapshot.take_snapshot`
calls `snapshot()`, and `python3 runner.pyz probe [--repo DIR] [--python PY] [--server-log FILE]`
prints the same object. The text parsers live in `probe_parse`, the nvidia-smi items in
`probe_gpu`, running a tool under its timeout in `probe_run`, the Slurm job in `probe_slurm`.

Every item is collected on its own: a missing tool, a timeout or a parse error becomes
`{"absent": "<reason>"}` for that item only, and `snapshot()` never raises.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from orchestrator.runner.interpreters import cached_answers, remember_answers
from orchestrator.runner.probe.gpu import compute_apps, query_gpus, query_topo, smi_header
from orchestrator.runner.probe.parse import (
    find_nccl_versions,
    parse_cpuinfo,
    parse_loadavg,
    parse_meminfo,
    parse_nvcc_version,
    parse_os_release,
    short_tail,
)
from orchestrator.runner.probe.reuse import file_key, gpu_key, holds, keep, kept
from orchestrator.runner.probe.slurm import slurm_item
from orchestrator.runner.probe.tools import Absent, run_command, which
from orchestrator.runner.redaction import REDACTED, is_secret_name

SCHEMA_VERSION = 1
# Kept across a runner's snapshots while the GPUs and nvidia-smi stay the same (reuse.py).
_GPU_KEPT = ("nvidia_smi", "topo")
ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "VLLM_", "TORCH_", "PYTORCH_")
ENV_EXTRA = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS")  # they change which libs load


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


def _nvcc_path() -> Optional[str]:
    path = shutil.which("nvcc")
    if path is None:
        for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if base and os.access(os.path.join(base, "bin", "nvcc"), os.X_OK):
                return os.path.join(base, "bin", "nvcc")
    return path


def _nvcc(path: Optional[str]) -> Dict[str, Any]:
    if path is None:
        raise Absent("nvcc not found on PATH, $CUDA_HOME or /usr/local/cuda")
    rc, out, err = run_command([path, "--version"], timeout=20)
    if rc != 0:
        raise Absent("nvcc --version failed (rc %d): %s" % (rc, short_tail(out + err)))
    info = dict(parse_nvcc_version(out))  # type: Dict[str, Any]
    info["path"] = path
    return info


_PYTHON_INFO = (
    "import json, platform, sys; print(json.dumps({'executable': sys.executable, "
    "'version': platform.python_version(), 'implementation': platform.python_implementation(), "
    "'prefix': sys.prefix, 'path': sys.path}))"
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
        raise Absent("%s failed (rc %d): %s" % (what, rc, short_tail(err or out)))
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise Absent("%s printed no JSON: %s" % (what, short_tail(out + err)))
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
        raise Absent("%s -m pip freeze failed (rc %d): %s" % (python, rc, short_tail(err or out)))
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
    which("git")

    def git(*args: str) -> Tuple[int, str, str]:
        # safe.directory: the repo may belong to another user; we only read it.
        return run_command(["git", "-c", "safe.directory=*", "-C", repo_dir, *args], timeout=20)

    rc, out, err = git("rev-parse", "HEAD")
    if rc != 0:
        raise Absent(
            "git rev-parse HEAD failed in %s (rc %d): %s" % (repo_dir, rc, short_tail(err))
        )
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
        info["status_porcelain"] = {"absent": short_tail(err)}
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
    nvcc = _nvcc_path()

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
        "nvidia_smi": lambda: smi_header(need_smi()),
        "gpus": lambda: query_gpus(need_smi()),
        "compute_apps": lambda: compute_apps(need_smi()),
        "topo": (lambda: query_topo(need_smi())) if topo else disabled("topo"),
        "nvcc": lambda: _nvcc(nvcc),
        "python": lambda: _python(py),
        "torch": lambda: _torch(py),
        "pip_freeze": (lambda: _pip_freeze(py)) if pip_freeze else disabled("pip_freeze"),
        "git": (lambda: _git(repo)) if repo else not_given("repo"),
        "server_log_nccl": (lambda: _server_log_nccl(log)) if log else not_given("server log"),
        "env": lambda: collect_env(os.environ),
        "slurm": lambda: slurm_item(os.environ),
    }  # type: Dict[str, Callable[[], Any]]
    reused = cached_answers(py, pip_freeze, repo or None)
    interpreter_reused = bool(reused)
    nvcc_key = file_key(nvcc)
    found = kept("nvcc", nvcc_key)
    if found is not None:
        reused["nvcc"] = found
    # The GPU items kept from an earlier snapshot wait for this one's `gpus` answer: reused when
    # the devices and nvidia-smi are the same, else run (reuse.py).
    waiting = [n for n in _GPU_KEPT if holds(n) and (topo or n != "topo")]
    # Items are independent and mostly wait on subprocesses: run them side by side.
    with ThreadPoolExecutor(max_workers=8) as pool:
        skip = set(reused) | set(waiting)
        futures = {name: pool.submit(_guard, fn) for name, fn in items.items() if name not in skip}
        results = {name: f.result() for name, f in futures.items()}
        key = (file_key(smi), gpu_key(results.get("gpus")))
        late = {}
        for name in waiting:
            found = kept(name, key)
            if found is not None:
                reused[name] = found
            else:
                late[name] = pool.submit(_guard, items[name])
        results.update((name, f.result()) for name, f in late.items())
    results.update(reused)
    results = {name: results[name] for name in items}  # the declared order, reused or not
    if not interpreter_reused or (pip_freeze and "pip_freeze" not in reused):
        remember_answers(py, results, pip_freeze, repo or None)
    keep("nvcc", nvcc_key, results["nvcc"])
    for name in _GPU_KEPT:
        if name != "topo" or topo:
            keep(name, key, results[name])

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
        "reused": sorted(reused),
    }
    return snap
