"""`orch bisect`'s answer as text: the first bad commit (or image) first, then the table of
tested points, then the commit's whole story; re-printed from a bundle by `--show RUN`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.errors import InputError
from orchestrator.results.documents import read_json
from orchestrator.results.layout import BISECT_JSON
from orchestrator.results.read import open_run


def show_bisect(ref: str, results_dir: Path) -> str:
    """`orch bisect --show RUN`: a finished bisect re-printed from its bundle."""
    run = open_run(ref, results_dir)
    doc = read_json(run.path / BISECT_JSON)
    if not isinstance(doc, dict):
        is_bisect = bool((run.run or {}).get("bisect"))
        raise InputError(
            f"{ref}: no finished bisect here",
            hint="continue it with --resume" if is_bisect else "this run is not a bisect",
        )
    return render_bisect(doc)


def render_bisect(doc: dict[str, Any]) -> str:
    """The answer first, then the table of tested commits, then the whole commit story."""
    from tabulate import tabulate

    result = doc["result"]
    lines = [result["message"]]
    lines += [f"warning: {w}" for w in result.get("warnings") or []]
    lines.append("")
    rows = []
    point = "image" if doc.get("images") else "commit"
    for p in result["points"]:
        values = p.get("values") or []
        mean = sum(values) / len(values) if values else None
        # an image is shown as written with its short digest; a commit by its short SHA
        ref, _, digest = str(p["commit"]).partition("@")
        rows.append(
            [
                p["index"],
                f"{ref} ({digest[:19]})" if doc.get("images") else p["commit"][:12],
                p.get("verdict") or "",
                "uncertain" if p.get("uncertain") else "",
                len(values),
                f"{mean:.4g}" if mean is not None else "-",
                f"{p['z']:.1f}" if p.get("z") is not None else "",
                p.get("runs"),
            ]
        )
    lines.append(
        tabulate(rows, headers=["#", point, "verdict", "note", "n", doc["metric"], "z", "runs"])
    )
    lines.append(
        f"\ngood mean {result['good_mean']:.4g}, bad mean {result['bad_mean']:.4g}, "
        f"noise (stdev) {result['noise']:.3g}; {len(result['points'])} {point}s tested of "
        f"{len(doc['commits'])}, {result['cell_runs']} cell runs"
    )
    if doc.get("first_bad_story"):
        lines += ["", doc["first_bad_story"].rstrip()]
    return "\n".join(lines)
