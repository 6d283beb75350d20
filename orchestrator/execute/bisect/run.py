"""`orch bisect`: run one cell at commits between good and bad until the first bad one is named;
with `--images`, at each of an ordered list of images (each pinned to its digest once) instead.

Every step is a one-cell run into the same bundle (resume mode), so each measurement is a
complete cell directory like any other, the per-commit setup cache on the host is reused, and a
bisect that stopped can be resumed: measurements already in the bundle are read back instead of
run again, and the search, being deterministic given them, retraces its path.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.adapters import bench_adapter
from orchestrator.analyze.metrics import metric_names, values_of
from orchestrator.cell import Cell, cell_id
from orchestrator.cell_ids import secret_masks
from orchestrator.config.host import Host, Inventory
from orchestrator.errors import BundleError, ExecutionError, InputError, OrchError
from orchestrator.execute.apply.outcomes import ApplyOptions
from orchestrator.execute.apply.run import Run
from orchestrator.execute.bisect.search import BisectPolicy, BisectResult, Ends, bisect
from orchestrator.execute.ship import ensure_runner
from orchestrator.execute.transport.connect import Connection, connect
from orchestrator.plan.select import select_cells
from orchestrator.results.bundle import FINISHED_STATUSES, BundleWriter
from orchestrator.results.documents import read_json
from orchestrator.results.layout import (
    BENCH_DIR,
    BISECT_JSON,
    CELL_JSON,
    CELLS_DIR,
    EXIT_JSON,
    METRICS_JSON,
)
from orchestrator.secrets.redact import secret_items_in
from orchestrator.secrets.values import extra_vars_in_argv, secrets_of_run

BISECT_FILE = BISECT_JSON
# A commit that fails before the benchmark produced numbers cannot be placed: skip it.
SKIP_STEPS = (
    *("repo", "setup", "preflight", "server_start", "ready", "verify_env", "bench", "runner"),
)


@dataclass
class BisectSetup:
    """What a bisect needs besides the measurements."""

    base: Cell  # the selected cell, as planned
    host: Host
    inventory: Inventory
    good: str
    bad: str
    metric: str
    results_dir: Path
    playbook_name: str
    playbook_files: Sequence[Path]
    playbook_dir: Path
    argv: Sequence[str]
    first_parent: bool = True
    policy: BisectPolicy = field(default_factory=BisectPolicy)
    commit_axes: frozenset[str] = frozenset()  # axes that only choose the commit
    secret_vars: dict[str, Any] = field(default_factory=dict)  # redacted like apply's
    # --good/--bad pinned on the origin for the whole bisect: {ref: Resolution.to_json()}
    refs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # --images, oldest first, each pinned once: [{"image": as written, "digest", "resolved_by"}];
    # when set, the bisect's points are these images and the commit stays the cell's own
    images: list[dict[str, Any]] = field(default_factory=list)
    image_axes: frozenset[str] = frozenset()  # axes that only choose the image

    @property
    def pinned(self) -> dict[str, str]:
        """{--good/--bad ref: the commit it was pinned to}."""
        return {r: str(p["sha"]) for r, p in self.refs.items() if isinstance(p.get("sha"), str)}


def _git(conn: Connection, dest: str, *args: str, timeout: float = 300) -> str:
    res = conn.run(["git", "-c", "safe.directory=*", "-C", dest, *args], timeout=timeout)
    if res.rc != 0:
        raise ExecutionError(
            f"{conn.host.name}: git {' '.join(args)} failed in {dest} (rc {res.rc}): "
            f"{res.stderr.strip()[-500:]}"
        )
    return res.stdout


def commit_range(
    conn: Connection,
    cell: Cell,
    good: str,
    bad: str,
    first_parent: bool,
    pinned: Mapping[str, str] | None = None,
) -> list[str]:
    """Full SHAs from good to bad (oldest first), read from the host's clone of the repo.

    `pinned` maps a ref to the commit the origin named for it (execute/refs.py): the clone's
    own tag of that name may be stale. A commit the clone lacks is fetched (tags with force).
    """
    if cell.repo is None:
        raise InputError("bisect needs a playbook with a repo:", key_path="repo")
    # Commands run in $HOME and argv is quoted, so `~/x` must become `x` as the runner does.
    dest, url = _home_relative(cell.repo.dest), cell.repo.url
    # The repo step's own check: a clone of another repository at dest (a fork, an old
    # repo.url) would give the commits of the wrong history, found only at the first step.
    runner = ensure_runner(conn)
    check = conn.run([conn.host.python, runner, "check-origin", dest, url], timeout=120)
    try:
        verdict = json.loads(check.stdout)
    except ValueError:
        raise ExecutionError(
            f"{conn.host.name}: runner.pyz check-origin failed (rc {check.rc}): "
            f"{check.stderr.strip()[-500:]}"
        ) from None
    if not verdict.get("ok"):
        raise InputError(f"{conn.host.name}: {verdict.get('reason')}", key_path="repo.dest")
    if verdict.get("origin") is None:  # nothing at dest yet (not even inside another repo's tree)
        res = conn.run(["git", "clone", "--quiet", "--", url, dest], timeout=3600)
        if res.rc != 0:
            raise ExecutionError(f"{conn.host.name}: git clone {url} failed: {res.stderr[-500:]}")

    def resolve(ref: str) -> str:
        name = (pinned or {}).get(ref, ref)
        argv = ["git", "-C", dest, "rev-parse", "--verify", f"{name}^{{commit}}"]
        res = conn.run(argv, timeout=60)
        if res.rc != 0 and cell.repo is not None and cell.repo.fetch != "never":
            _git(conn, dest, "fetch", "--quiet", "--force", "--tags", "origin", timeout=3600)
            res = conn.run(argv, timeout=60)
            if res.rc != 0 and name != ref:  # only a ref the clone never fetches reaches it
                conn.run(["git", "-C", dest, "fetch", "--quiet", "origin", name], timeout=3600)
                res = conn.run(argv, timeout=60)
        if res.rc != 0:
            raise InputError(f"{ref!r} is not a commit in {url}", hint="check --good/--bad")
        return res.stdout.strip()

    good_sha, bad_sha = resolve(good), resolve(bad)
    args = ["rev-list", "--reverse"] + (["--first-parent"] if first_parent else [])
    between = _git(conn, dest, *args, f"{good_sha}..{bad_sha}").split()
    if not between or between[-1] != bad_sha:
        raise InputError(f"bad ({bad}) is not a descendant of good ({good})")
    return [good_sha, *between]


def pinned_image(image: Mapping[str, Any]) -> str:
    """`REF@sha256:...`: an --images entry as its digest pins it (a point of the search)."""
    written = str(image["image"])
    return written if "@" in written else f"{written}@{image['digest']}"


def _home_relative(path: str) -> str:
    """`~` and `~/x` as paths relative to the command's cwd ($HOME); others unchanged."""
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path


def commit_story(conn: Connection, cell: Cell, sha: str) -> str:
    """The commit's full message and --stat, never truncated."""
    assert cell.repo is not None
    dest = _home_relative(cell.repo.dest)
    return _git(conn, dest, "show", "--stat", "--format=fuller", "--no-color", sha)


class MetricNotReported(ExecutionError):
    """`--metric` names nothing the bench reported; `suggestion` is the closest name if any.

    The measurement stays in the bundle (a step's id does not depend on the metric), so a
    resume with the right `--metric` reads it back instead of measuring again.
    """

    def __init__(self, message: str, *, suggestion: str | None) -> None:
        super().__init__(message)
        self.suggestion = suggestion


class Bisection:
    """One `orch bisect`, backed by a bundle."""

    def __init__(self, setup: BisectSetup, *, run_id: str | None = None) -> None:
        self.setup = setup
        self.run_id = run_id
        self.cells: list[Cell] = []
        self.doc: dict[str, Any] = {}
        self.log: Callable[[str], None] = lambda _msg: None
        self._metric_seen = False  # some measured commit reported --metric
        self._ratios: list[float] = []  # the runner's reading / the parse, at the ends

    def _stop_rule(self, ends: Ends | None) -> dict[str, Any] | None:
        """An inner step's repeats rule: stop once the test against the ends decides. None for
        an end (its id stays what it was) or when the bench cannot read --metric between
        repeats: every run then takes all its repeats. The runner's stop only saves repeats;
        the call is the controller's, on its own parse (search.py)."""
        if ends is None:
            return None
        base = self.setup.base
        watch = bench_adapter(base.bench.adapter).watch(base.bench, self.setup.metric)
        if watch is None:
            return None
        scale = self._unit_scale()
        return {
            "min": 1,
            "metrics": [self.setup.metric],
            "watch": [watch.model_dump(mode="json")],
            "chosen": "metric",
            "between": {
                "good": ends.good * scale,
                "bad": ends.bad * scale,
                "noise": ends.noise * scale,
                "error": ends.error,
            },
        }

    def _unit_scale(self) -> float:
        """The runner's reading over the controller's parse of --metric, from the inner steps so
        far: 1 unless the adapter converts units (a real client against `orch sim serve`)."""
        ratios = sorted(self._ratios) or [1.0]
        return ratios[len(ratios) // 2]

    def _note_units(self, cid: str, parsed: Mapping[int, float]) -> None:
        """Ratios of what the runner read (bench/<n>/exit.json) to the parse, per repeat."""
        cell_dir = self.setup.results_dir / str(self.run_id) / CELLS_DIR / cid
        for n, value in parsed.items():
            try:
                exit_doc = read_json(cell_dir / BENCH_DIR / str(n) / EXIT_JSON)
            except BundleError:
                continue
            seen = (exit_doc or {}).get("watched") if isinstance(exit_doc, dict) else None
            raw = seen.get(self.setup.metric) if isinstance(seen, dict) else None
            if isinstance(raw, int | float) and raw > 0 and value > 0:
                self._ratios.append(float(raw) / value)

    def _point_axis(self, point: str) -> tuple[str, str]:
        """The axis a step names its point by: its commit's short SHA, or its image."""
        if self.setup.images:
            return "bisect_image", str(self._image(point)["image"])
        return "bisect_commit", point[:12]

    def _image(self, point: str) -> Mapping[str, Any]:
        return next(i for i in self.setup.images if pinned_image(i) == point)

    def _step_cell(self, sha: str, repeats: int, attempt: int, ends: Ends | None = None) -> Cell:
        base = self.setup.base
        # An axis that only named the commit (it rendered to the requested version) would now
        # mislabel every step: the measured commit replaces it.
        dropped = self.setup.commit_axes | self.setup.image_axes
        kept = {k: v for k, v in base.axes.items() if k not in dropped}
        axis, name = self._point_axis(sha)
        axes = {**kept, axis: name, "bisect_run": attempt}
        data = base.model_dump(mode="json")
        data["axes"] = axes
        if self.setup.images:
            # A step is its image, by the digest it was pinned to once: never resolved again.
            image = self._image(sha)
            container = {
                **data["server"]["container"],
                "image": image["image"],
                "digest": image["digest"],
                "resolved_at": image.get("resolved_at"),
                "resolved_by": image.get("resolved_by"),
            }
            data["server"] = {**data["server"], "container": container}
        else:
            assert base.repo is not None
            # A step is its commit: no requested ref of the base stands in for it in the id.
            data["repo"] = {**data["repo"], "version": sha, "requested": None}
            data["repo"].update(resolved_at=None, resolved_by=None)
        data["bench"] = {
            **data["bench"],
            "repeats": repeats,
            "settle": self._stop_rule(ends),
        }
        spec = {k: v for k, v in data.items() if k != "id"}
        # Secret values are hashed as placeholders, as the planner does: no id depends on one.
        masks = secret_masks(
            [
                *secret_items_in(self.setup.secret_vars, base.secrets),
                *secret_items_in(self.setup.host.vars, base.secrets),  # inventory secrets too
                *((k, v) for k, v in base.env.items() if k in base.secrets),
            ]
        )
        data["id"] = cell_id(axes, base.host, spec, masks)
        return Cell.model_validate(data)

    def _run(self, cell: Cell) -> dict[str, Any]:
        if cell.id not in {c.id for c in self.cells}:
            self.cells.append(cell)
        run = Run(
            playbook_name=self.setup.playbook_name,
            playbook_files=self.setup.playbook_files,
            playbook_dir=self.setup.playbook_dir,
            inventory=self.setup.inventory,
            cells=self.cells,
            secrets=secrets_of_run(
                self.cells,
                self.setup.inventory,
                self.setup.secret_vars,
                *extra_vars_in_argv(self.setup.argv),
                files=self.setup.playbook_files,
            ),
            options=ApplyOptions(
                results_dir=self.setup.results_dir,
                run_id=self.run_id,
                resume=self.run_id is not None,
                argv=self.setup.argv,
                extra_run_fields={
                    "bisect": True,
                    "bisect_refs": self.setup.refs,
                    "bisect_images": self.setup.images,
                },
            ),
        )
        self.run_id = run.run_id
        run.execute()
        return self._recorded(cell.id) or {}

    def _recorded(self, cid: str) -> dict[str, Any] | None:
        """The step's cell as the bundle holds it, when it finished (passed or failed).

        A step interrupted by Ctrl-C is in the bundle too, but it measured nothing: it must be
        run again (as `orch apply --resume` does), not read back as a commit that cannot be
        measured.
        """
        path = self.setup.results_dir / str(self.run_id) / CELLS_DIR / cid
        try:
            cell = read_json(path / CELL_JSON, required=True)
            metrics = read_json(path / METRICS_JSON, required=True)
        except BundleError:
            return None
        if not isinstance(cell, dict) or cell.get("status") not in FINISHED_STATUSES:
            return None
        return {"cell": cell, "metrics": metrics}

    def measure(self, sha: str, repeats: int, ends: Ends | None = None) -> list[float] | None:
        """Run (or read back) one measurement of the cell at `sha`; with `ends`, the run stops
        as soon as the sequential test decides (at most `repeats`)."""
        axis, name = self._point_axis(sha)
        attempt = sum(1 for c in self.cells if c.axes.get(axis) == name) + 1
        cell = self._step_cell(sha, repeats, attempt, ends)
        got = self._recorded(cell.id) if self.run_id else None
        if got is None:
            upto = f"up to {repeats} repeats, until decided" if ends else f"{repeats} repeats"
            self.log(f"measuring {sha[:12]} (run {attempt}, {upto})")
            got = self._run(cell)
        elif cell.id not in {c.id for c in self.cells}:
            self.cells.append(cell)
        cell_doc = got.get("cell") or {}
        status, step = cell_doc.get("status"), cell_doc.get("failed_step")
        values = [
            float(r[self.setup.metric])
            for r in (got.get("metrics") or {}).get("repeats", [])
            if isinstance(r.get(self.setup.metric), int | float)
        ]
        if values:
            self._metric_seen = True
            if ends is not None:
                parsed = {
                    int(r["n"]): float(r[self.setup.metric])
                    for r in (got.get("metrics") or {}).get("repeats", [])
                    if isinstance(r.get(self.setup.metric), int | float)
                    and isinstance(r.get("n"), int)
                }
                self._note_units(cell.id, parsed)
            return values
        if status != "passed" and (step in SKIP_STEPS or step is None):
            self.log(f"{sha[:12]}: cannot be measured ({step}): skipped")
            return None
        raise self._no_such_metric(sha, got)

    def _no_such_metric(self, sha: str, got: Mapping[str, Any]) -> OrchError:
        """The bench ran but never reported --metric: name what it did report."""
        repeats = (got.get("metrics") or {}).get("repeats", [])
        reported = [m for m in metric_names(repeats) if values_of(repeats, m)]
        shown = ", ".join(reported[:20]) + (", ..." if len(reported) > 20 else "")
        if self._metric_seen:  # earlier commits reported it: the bench's output changed here
            return ExecutionError(
                f"{sha[:12]} stopped reporting {self.setup.metric!r}"
                + (f"; it reported: {shown}" if reported else ""),
                hint="the bench's output changed between the measured commits",
            )
        message = f"{sha[:12]} produced no {self.setup.metric!r} values"
        if not reported:
            return ExecutionError(message, hint="pick a metric the bench reports with --metric")
        close = difflib.get_close_matches(self.setup.metric, reported, n=1, cutoff=0.6)
        return MetricNotReported(
            f"{message}; the bench reported: {shown}", suggestion=close[0] if close else None
        )

    def execute(self, conn_factory: Callable[[Host], Connection] = connect) -> BisectResult:
        """Bisect; writes bisect.json (progress and result) into the bundle."""
        if self.setup.images:
            return self._execute_images()
        conn = conn_factory(self.setup.host)
        try:
            setup = self.setup
            commits = commit_range(
                conn, setup.base, setup.good, setup.bad, setup.first_parent, setup.pinned
            )
        finally:
            conn.close()
        for ref, pin in self.setup.refs.items():  # the origin's answer, not the clone's tags
            self.log(f"{ref!r} is {pin.get('sha')} at the origin ({pin.get('resolved_by')})")
        self.log(f"{len(commits)} commits from {commits[0][:12]} to {commits[-1][:12]}")
        result = bisect(commits, self.measure, self.setup.policy)
        story = ""
        if result.first_bad:
            conn = conn_factory(self.setup.host)
            try:
                story = commit_story(conn, self.setup.base, result.first_bad)
            except OrchError as exc:
                story = f"(could not read the commit: {exc})"
            finally:
                conn.close()
        self.doc = {
            "schema_version": 1,
            "good": self.setup.good,
            "bad": self.setup.bad,
            "refs": self.setup.refs,
            "metric": self.setup.metric,
            "host": self.setup.host.name,
            "base_cell": self.setup.base.id,
            "commits": commits,
            "result": result.to_json(),
            "first_bad_story": story,
        }
        self._write_doc()
        return result

    def _execute_images(self) -> BisectResult:
        """Bisect over --images: the same search and confirmation, its points the images."""
        points = [pinned_image(i) for i in self.setup.images]
        for image in self.setup.images:
            self.log(f"{image['image']} is {image['digest']} ({image.get('resolved_by')})")
        result = bisect(points, self.measure, self.setup.policy)
        # the search speaks of commits; here each point is an image
        result.message = result.message.replace("commit", "image")
        result.warnings = [w.replace("commit", "image") for w in result.warnings]
        self.doc = {
            "schema_version": 1,
            "good": self.setup.good,
            "bad": self.setup.bad,
            "images": self.setup.images,
            "metric": self.setup.metric,
            "host": self.setup.host.name,
            "base_cell": self.setup.base.id,
            "commits": points,
            "result": result.to_json(),
            "first_bad_story": "",
        }
        self._write_doc()
        return result

    def _write_doc(self) -> None:
        writer = BundleWriter(self.setup.results_dir, str(self.run_id), new=False)
        writer.write_json(BISECT_FILE, self.doc)
        writer.finalize()


def pick_bisect_cell(cells: Sequence[Cell], selector: str) -> tuple[Cell, frozenset[str]]:
    """The one cell `--cell` picks to bisect, and its axes that only choose the commit.

    Cells that differ only in the repo version (an axis over commits) are one cell to bisect.
    """
    picked = select_cells(
        cells,
        selector,
        cell_id=lambda c: c.id,
        axes=lambda c: c.axes,
        host=lambda c: c.host,
    )
    base = picked[0]

    def without_commit(c: Any) -> str:
        data = c.model_dump(mode="json", exclude={"id", "axes", "host"})
        if data.get("repo"):
            data["repo"].pop("version", None)
        return json.dumps(data, sort_keys=True)

    same_host = [c for c in picked if c.host == base.host]
    if len({without_commit(c) for c in same_host}) > 1:
        names = ", ".join(c.id for c in same_host[:6])
        raise InputError(
            f"--cell {selector!r} matches {len(picked)} cells: {names}", hint="name more axes"
        )
    version = base.repo.version if base.repo else None
    commit_axes = frozenset(
        k
        for k in base.axes
        if base.axes[k] == version or len({json.dumps(c.axes.get(k)) for c in same_host}) > 1
    )
    return base, commit_axes
