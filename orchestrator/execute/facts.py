"""Snapshot hosts now, without running anything: `orch facts` and `orch audit`'s drift check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.config.host import Host
from orchestrator.errors import OrchError
from orchestrator.execute.apply.pool import HostPool
from orchestrator.execute.ship import ensure_runner
from orchestrator.execute.transport.connect import connect


def probe_host(host: Host, *, repo: str | None = None, python: str | None = None) -> dict[str, Any]:
    """Run the shipped probe on `host`; failures come back as {"absent": reason}, never raised."""
    try:
        conn = connect(host)
    except OrchError as exc:
        return {"absent": f"cannot connect: {exc}"}
    try:
        runner = ensure_runner(conn)
        argv = [host.python, runner, "probe"]
        if repo:
            argv += ["--repo", repo]
        if python:
            argv += ["--python", python]
        res = conn.run(argv, timeout=180)
        try:
            facts: dict[str, Any] = json.loads(res.stdout)
        except ValueError:
            return {"absent": f"probe failed (rc {res.rc}): {res.stderr.strip()[-500:]}"}
        facts["host_key_verified"] = conn.host_key_verified
        return facts
    except OrchError as exc:
        return {"absent": str(exc)}
    finally:
        conn.close()


def probe_hosts(hosts: Sequence[Host], *, max_parallel: int = 16) -> dict[str, dict[str, Any]]:
    """`probe_host` on every host in parallel; results by host name, in the given order."""
    outcomes = HostPool(max_parallel=max_parallel).map(hosts, probe_host)
    # probe_host turns every expected failure into "absent"; anything else is a bug in the probe
    # path, still reported per host so the other hosts' facts stand.
    return {
        name: o.value if o.value is not None else {"absent": f"probe failed: {o.error!r}"}
        for name, o in outcomes.items()
    }


def summary_row(name: str, facts: dict[str, Any]) -> list[str]:
    """One line of `orch facts`: what a person checks first before a long run."""
    if "absent" in facts and len(facts) <= 2:
        return [name, "-", "-", "-", "-", "-", f"unreachable: {facts['absent']}"]
    gpus = facts.get("gpus")
    gpus = gpus if isinstance(gpus, dict) else {}
    devices = gpus.get("devices")
    gpu_text, clocks, notes = "none", "-", []
    if isinstance(devices, list) and devices:
        names = {str(d.get("name")) for d in devices if isinstance(d, dict)}
        gpu_text = f"{len(devices)}x {', '.join(sorted(names))}"
        lows = []
        for d in devices:
            cur, top = d.get("clocks.sm"), d.get("clocks.max.sm")
            if isinstance(cur, int | float) and isinstance(top, int | float) and top:
                lows.append(cur / top)
            flags = _gpu_flags(d)
            if flags:
                notes.append(f"gpu{d.get('index')}: {', '.join(flags)}")
        if lows:
            clocks = f"sm {min(lows) * 100:.0f}%..{max(lows) * 100:.0f}% of max"
        if len(notes) > 3:
            notes[3:] = [f"+{len(notes) - 3} more GPUs flagged (--json)"]
    elif gpus.get("absent"):
        gpu_text = f"absent ({str(gpus['absent'])[:40]})"
    driver, cuda, kernel = (_section(facts, k) for k in ("driver", "cuda", "kernel"))
    return [
        name,
        str(facts.get("hostname", "-")),
        str(kernel.get("release", "-")),
        gpu_text,
        str(driver.get("version") or "-"),
        str(cuda.get("driver") or "-"),
        "; ".join([clocks, *notes]),
    ]


def _below(current: Any, top: Any) -> bool:
    num = (int, float)
    return isinstance(current, num) and isinstance(top, num) and current < top


def _gpu_flags(device: dict[str, Any]) -> list[str]:
    """What is wrong with one GPU: clock event reasons, and (unless it is idle, when clocks and
    the PCIe generation drop by design) an SM clock under 90% of max or a PCIe link below max.
    A narrower PCIe link than max is flagged even when idle."""
    names = [str(r) for r in device.get("clocks_event_reasons.names") or []]
    flags = [r for r in names if r != "gpu_idle"]
    idle = "gpu_idle" in names
    cur, top = device.get("clocks.sm"), device.get("clocks.max.sm")
    if not idle and _below(cur, 0.9 * top if isinstance(top, int | float) else None):
        flags.append(f"sm {cur}/{top} MHz")
    gen = device.get("pcie.link.gen.gpucurrent", device.get("pcie.link.gen.current"))
    gen_max = device.get("pcie.link.gen.max")
    width, width_max = device.get("pcie.link.width.current"), device.get("pcie.link.width.max")
    if not idle and _below(gen, gen_max):
        flags.append(f"pcie gen{gen}/{gen_max}")
    if _below(width, width_max):
        flags.append(f"pcie x{width}/x{width_max}")
    return flags


SUMMARY_HEADERS = ["host", "hostname", "kernel", "gpus", "driver", "cuda", "state"]


def _section(facts: dict[str, Any], key: str) -> dict[str, Any]:
    value = facts.get(key)
    return value if isinstance(value, dict) else {}
