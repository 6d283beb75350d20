"""`orch bisect` as a service: the bisection of one cell of a plan between two refs, or over an
ordered list of images (`--images`), each pinned to its registry digest once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.app.plan import Plan
from orchestrator.cell import Cell
from orchestrator.config.host import Inventory
from orchestrator.errors import InputError
from orchestrator.execute.bisect.run import Bisection, BisectSetup, pick_bisect_cell
from orchestrator.execute.bisect.search import BisectPolicy
from orchestrator.execute.images import ImageKey, pin_images, recorded_images
from orchestrator.execute.refs import pin_revision
from orchestrator.results.read import open_run


@dataclass(frozen=True)
class BisectRequest:
    """Which cell, between which refs, judged by which metric, and how hard to look."""

    selector: str
    good: str
    bad: str
    metric: str | None = None  # default: the cell's first expectation, else output_throughput
    results_dir: Path = Path("results")
    resume: str | None = None  # a bisect run to continue
    all_parents: bool = False
    policy: BisectPolicy = field(default_factory=BisectPolicy)
    argv: Sequence[str] = ()
    images: Sequence[str] = ()  # --images, oldest first: bisected instead of commits


def pinned_images(base: Cell, inventory: Inventory, images: Sequence[str]) -> list[dict[str, Any]]:
    """Each of `images` pinned to its registry digest once, asked on the cell's host as a run
    pins its tags (execute/images.py): InputError for a list that cannot be bisected."""
    container = base.server.container if base.server is not None else None
    if container is None:
        raise InputError(
            "--images needs a cell whose server runs in a container", key_path="server.container"
        )
    if len(images) < 2 or len(set(images)) != len(images):
        raise InputError(
            f"--images names {len(images)} image(s), {len(set(images))} different",
            key_path="--images",
            hint="give two or more different images, oldest (good) first, newest (bad) last",
        )
    cells = []
    for image in images:
        pin = container.model_copy(
            update={"image": image, "digest": None, "resolved_at": None, "resolved_by": None}
        )
        assert base.server is not None
        server = base.server.model_copy(update={"container": pin})
        cells.append(base.model_copy(update={"server": server}))
    pinned, _ = pin_images(cells, inventory)
    _refuse_same_digest(pinned)
    out: list[dict[str, Any]] = []
    for cell in pinned:
        assert cell.server is not None and cell.server.container is not None
        pin = cell.server.container
        out.append(
            {
                "image": pin.image,
                "digest": pin.digest,
                "resolved_at": pin.resolved_at,
                "resolved_by": pin.resolved_by,
            }
        )
    return out


def _refuse_same_digest(pinned: Sequence[Cell]) -> None:
    """InputError when two listed references pinned to one digest: the search would judge
    one image twice and could name a step between them as the change."""
    first: dict[str, str] = {}  # digest -> the first reference that named it
    for cell in pinned:
        pin = cell.server.container if cell.server is not None else None
        if pin is None or pin.digest is None:
            continue
        if pin.digest in first:
            raise InputError(
                f"--images names one image twice: {first[pin.digest]} and {pin.image} "
                f"both resolve to {pin.digest}",
                key_path="--images",
                hint="drop one of them (a tag that moved, or a tag and its own digest)",
            )
        first[pin.digest] = pin.image


def prepare_bisect(plan: Plan, request: BisectRequest) -> Bisection:
    """The bisection `request` asks of `plan`: a resumed run keeps its first start's commits."""
    base, commit_axes = pick_bisect_cell(list(plan.cells), request.selector)
    metric = request.metric or next(iter(base.expect), "output_throughput")
    run_id = None
    refs: dict[str, dict[str, Any]] = {}
    images: list[dict[str, Any]] = []
    earlier: dict[ImageKey, tuple[str, str]] | None = None
    if request.resume:
        run = open_run(request.resume, request.results_dir)
        run_id = run.path.name
        refs = dict((run.run or {}).get("bisect_refs") or {})  # the first start's commits
        images = list((run.run or {}).get("bisect_images") or [])  # and its digests
        earlier = recorded_images(run.path)
    if request.images and [i.get("image") for i in images] != list(request.images):
        images = pinned_images(base, plan.inventory, request.images)
    if not images:
        # over commits, a cell in a container runs one image: its tag pinned once, as apply
        # pins it (a resume keeps the first start's digest); the runner refuses a tag unpinned
        (base,), _ = pin_images([base], plan.inventory, earlier=earlier)
    image_axes: frozenset[str] = frozenset()
    if images and base.server is not None and base.server.container is not None:
        # an axis that named the image (`matrix.image`) would mislabel every step
        written = base.server.container.image
        image_axes = frozenset(k for k, v in base.axes.items() if v == written)
    for key, ref in (("--good", request.good), ("--bad", request.bad)):
        if images:
            break  # the commit stays the cell's own
        if ref not in refs:
            res = pin_revision(base, plan.inventory, ref, key_path=key)
            if res is not None and res.sha is not None:
                refs[ref] = res.to_json()
    setup = BisectSetup(
        base=base,
        host=plan.inventory.hosts[base.host],
        inventory=plan.inventory,
        good=request.good,
        bad=request.bad,
        metric=metric,
        results_dir=request.results_dir,
        playbook_name=plan.playbook.name,
        playbook_files=plan.playbook.files,
        playbook_dir=plan.playbook.path.parent,
        argv=list(request.argv),
        first_parent=not request.all_parents,
        commit_axes=commit_axes,
        secret_vars=plan.variables,
        refs=refs,
        images=images,
        image_axes=image_axes,
        policy=request.policy,
    )
    return Bisection(setup, run_id=run_id)
