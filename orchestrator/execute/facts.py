"""Snapshot hosts now, without running anything: `orch facts` and `orch audit`'s drift check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.config.host import Host
from orchestrator.errors import OrchError
from orchestrator.execute.connection import connect
from orchestrator.execute.ship import ensure_runner


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
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(hosts)))) as pool:
        results = list(pool.map(probe_host, hosts))
    return {h.name: r for h, r in zip(hosts, results, strict=True)}


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
            reasons = [r for r in d.get("clocks_event_reasons.names") or [] if r != "gpu_idle"]
            if reasons:
                notes.append(f"gpu{d.get('index')}: {','.join(map(str, reasons))}")
        if lows:
            clocks = f"sm {min(lows) * 100:.0f}%..{max(lows) * 100:.0f}% of max"
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
        "; ".join([clocks, *notes[:3]]),
    ]


SUMMARY_HEADERS = ["host", "hostname", "kernel", "gpus", "driver", "cuda", "state"]


def _section(facts: dict[str, Any], key: str) -> dict[str, Any]:
    value = facts.get(key)
    return value if isinstance(value, dict) else {}
