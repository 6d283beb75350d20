"""docs/ARCHITECTURE.md names every module of orchestrator/, so the map cannot drift silently."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules() -> list[str]:
    """Every module as a path relative to orchestrator/, e.g. `plan/build.py`."""
    return sorted(
        str(p.relative_to(ROOT / "orchestrator"))
        for p in (ROOT / "orchestrator").rglob("*.py")
        if p.name != "__init__.py"
    )


def test_every_module_is_in_the_architecture_doc() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = [m for m in modules() if f"`{m}`" not in doc]
    assert missing == [], f"add to docs/ARCHITECTURE.md (as `path`): {missing}"


def test_the_repository_points_nowhere_outside_itself() -> None:
    # a user's clone has only this repository: no path may lead out of it
    outside = [
        "../" + "shared",
        "shared/" + "samples",
        "shared/" + "REFERENCE",
        "shared/" + "DESIGN",
    ]
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    hits = []
    for name in tracked.split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        if path.suffix in {".py", ".md", ".yml", ".yaml", ".sh", ".toml", ".txt", ".json"}:
            text = path.read_text(errors="replace")
            if any(word in text for word in outside):
                hits.append(str(path.relative_to(ROOT)))
    assert hits == []
