"""Server and bench images pinned once per run: each `server.container.image` (and
`bench.container.image`) tag is resolved to the
digest its registry names now, asked on the first host of the run that runs it (through
`runner.pyz resolve-image`, as repo refs are asked in execute/refs.py), and every cell runs
that digest. A reference written with a digest is pinned as written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Host, Inventory
from orchestrator.container_pin import ContainerPin
from orchestrator.errors import InputError, OrchError, SourceLocation
from orchestrator.execute.ship import ensure_runner
from orchestrator.execute.transport.connect import Connection, connect
from orchestrator.results.documents import recorded_plan_cells
from orchestrator.runner.image import parse_image
from orchestrator.runner.registry import registry_digest

ImageKey = tuple[str, bool, str | None]  # (image as written, tls_verify, conf)
OWNERS = ("server", "bench")  # the sections that may run in an image


def pin_images(
    cells: Sequence[Cell],
    inventory: Inventory,
    *,
    earlier: Mapping[ImageKey, tuple[str, str]] | None = None,
    ask_hosts: bool = True,
    location: SourceLocation | None = None,
    locate: Callable[[tuple[str, ...]], SourceLocation | None] | None = None,
    conn_factory: Callable[[Host], Connection] = connect,
) -> tuple[list[Cell], list[str]]:
    """`cells` with every server image pinned to a digest, and one line per image saying
    what it was pinned to. Without `ask_hosts` (`orch plan`) only a host on this machine is
    asked; the others' tags stay unpinned; `earlier` (a resumed run's first pins) wins over
    asking again. InputError (exit 2) when a registry has no such tag, or when `orch apply`
    cannot ask any host, located by `locate` (a key path's place) or at `location`."""
    found: dict[ImageKey, tuple[str, str]] = {}  # key -> (digest, by)
    notes: dict[ImageKey, str] = {}
    for cell, owner, pin in ((c, o, p) for c in cells for o, p in _pins_of(c)):
        if pin.digest is not None:
            continue
        key = (pin.image, pin.tls_verify, pin.conf)
        if key in found or key in notes:
            continue
        ref = parse_image(pin.image)
        if ref.digest:
            found[key] = (ref.digest, "reference")
            continue
        if earlier and key in earlier:  # one run never mixes two images of one tag
            found[key] = earlier[key]
            continue
        host = inventory.hosts[cell.host]
        where = locate((owner, "container", "image")) if locate is not None else location
        if not ask_hosts and host.connection != "local":
            notes[key] = "a tag: `orch apply` pins it to its registry digest on the host"
            continue
        digest, why, known = _ask(host, pin, conn_factory)
        if digest is None:
            if not known:
                raise InputError(
                    f"{pin.image!r}: its registry has no such image ({why})",
                    location=where,
                    key_path=f"{owner}.container.image",
                    hint="push the image, or name a tag or digest the registry holds",
                )
            if ask_hosts:
                raise InputError(
                    f"cannot pin {pin.image!r} to a digest on host {host.name}: {why}",
                    location=where,
                    key_path=f"{owner}.container.image",
                    hint="the host needs skopeo and the registry (tls_verify: false for http)",
                )
            notes[key] = f"not resolved here ({why}); `orch apply` asks the host"
            continue
        found[key] = (digest, f"host {host.name}")
    at = time.time()
    pinned: list[Cell] = []
    for cell in cells:
        update: dict[str, Any] = {}
        for owner, pin in _pins_of(cell):
            hit = found.get((pin.image, pin.tls_verify, pin.conf))
            if hit is None or pin.digest is not None:
                continue
            new_pin = pin.model_copy(
                update={"digest": hit[0], "resolved_at": at, "resolved_by": hit[1]}
            )
            update[owner] = getattr(cell, owner).model_copy(update={"container": new_pin})
        pinned.append(cell.model_copy(update=update) if update else cell)
    lines = [
        f"{image}: {digest} (resolved by {by})" for (image, _, _), (digest, by) in found.items()
    ]
    lines += [f"{image}: {note}" for (image, _, _), note in notes.items()]
    return pinned, lines


def _pins_of(cell: Cell) -> list[tuple[str, ContainerPin]]:
    """The cell's images: (`server` or `bench`, its pin) for each section run in one."""
    out = []
    for owner in OWNERS:
        section = getattr(cell, owner)
        pin = section.container if section is not None else None
        if pin is not None:
            out.append((owner, pin))
    return out


def _ask(
    host: Host, pin: ContainerPin, conn_factory: Callable[[Host], Connection]
) -> tuple[str | None, str, bool]:
    """(digest, why, known) asked on `host`: in this process for this machine, else through
    `runner.pyz resolve-image`."""
    if host.connection == "local":
        return registry_digest(pin.image, pin.tls_verify, pin.conf)
    try:
        conn = conn_factory(host)
    except OrchError as exc:
        return None, f"cannot connect: {exc.message}", True
    argv = ["resolve-image", pin.image]
    if not pin.tls_verify:
        argv.append("--no-tls-verify")
    if pin.conf:
        argv += ["--conf", pin.conf]
    try:
        runner = ensure_runner(conn)
        res = conn.run([host.python, runner, *argv], timeout=180)
    except OrchError as exc:
        return None, exc.message, True
    finally:
        conn.close()
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        return None, f"runner.pyz resolve-image failed (rc {res.rc}): {res.stderr[-300:]}", True
    if isinstance(doc, dict) and doc.get("ok") and isinstance(doc.get("digest"), str):
        return str(doc["digest"]), "", True
    reason = doc.get("reason") if isinstance(doc, dict) else None
    unknown = bool(doc.get("unknown")) if isinstance(doc, dict) else False
    return None, str(reason or f"rc {res.rc}"), not unknown


def recorded_images(run_dir: Path) -> dict[ImageKey, tuple[str, str]]:
    """The image pins a run's first start recorded (plan.json), for a resume to keep."""
    out: dict[ImageKey, tuple[str, str]] = {}
    for cell in recorded_plan_cells(run_dir) or []:
        for owner in OWNERS:
            section = cell.get(owner)
            pin = section.get("container") if isinstance(section, dict) else None
            if not isinstance(pin, dict) or not pin.get("digest") or not pin.get("image"):
                continue
            conf = pin.get("conf")
            tls = pin.get("tls_verify") is not False
            key = (str(pin["image"]), tls, str(conf) if conf else None)
            out.setdefault(
                key, (str(pin["digest"]), f"kept from the first start of {run_dir.name}")
            )
    return out
