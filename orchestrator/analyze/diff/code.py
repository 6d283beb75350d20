"""The code section of `orch diff`: the commits, describe and dirty state of two cells' checkouts,
and the commits between them where a local clone of the repository has both."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from orchestrator.analyze.diff.model import SECTION_TITLES, Block, Entry, Section, as_dict, same
from orchestrator.analyze.evidence import CellEvidence

_REPO_FIELDS = ("requested", "sha", "describe", "dirty", "dirty_action", "status_porcelain")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "core.quotepath=off", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GIT_PAGER": "cat", "LC_ALL": "C"},
        timeout=120,
    )


def _repo_candidates(a: CellEvidence, b: CellEvidence) -> list[Path]:
    """Where the repo may be on this machine: each cell's dest, then a local-path URL."""
    out: list[Path] = []
    for cell in (a, b):
        pin = as_dict(cell.cell.get("repo"))
        dest = pin.get("dest")
        if isinstance(dest, str) and dest:
            path = Path(dest).expanduser()
            out.append(path if path.is_absolute() else Path.home() / path)
    for cell in (a, b):
        url = as_dict(cell.cell.get("repo")).get("url")
        if isinstance(url, str) and url:
            local = url.removeprefix("file://")
            if local.startswith(("/", "~", ".")):
                out.append(Path(local).expanduser())
    unique: list[Path] = []
    for path in out:
        if path not in unique:
            unique.append(path)
    return unique


def _has_commits(repo: Path, shas: Iterable[str]) -> bool:
    if not repo.exists():
        return False
    try:
        if _git(repo, "rev-parse", "--git-dir").returncode != 0:
            return False
        return all(_git(repo, "cat-file", "-e", f"{s}^{{commit}}").returncode == 0 for s in shas)
    except (OSError, subprocess.SubprocessError):
        return False


def _git_lines(repo: Path, *args: str) -> list[str]:
    result = _git(repo, *args)
    if result.returncode != 0:
        return [f"(git {' '.join(args)} failed: {result.stderr.strip()})"]
    return result.stdout.splitlines()


def code_section(a: CellEvidence, b: CellEvidence, repo_path: Path | None) -> Section:
    section = Section("code", SECTION_TITLES["code"])
    pin_a, pin_b = as_dict(a.cell.get("repo")), as_dict(b.cell.get("repo"))
    repo_a, repo_b = dict(a.repo), dict(b.repo)
    # before the repo step ran there is no repo.json: the plan's requested ref still counts
    repo_a.setdefault("requested", pin_a.get("requested") or pin_a.get("version"))
    repo_b.setdefault("requested", pin_b.get("requested") or pin_b.get("version"))
    for key in _REPO_FIELDS:
        va, vb = repo_a.get(key), repo_b.get(key)
        if not same(va, vb):
            section.entries.append(Entry(key, va, vb))
    for key in ("url", "dest", "setup"):
        if not same(pin_a.get(key), pin_b.get(key)):
            section.entries.append(Entry(f"repo.{key}", pin_a.get(key), pin_b.get(key)))
    sha_a, sha_b = repo_a.get("sha"), repo_b.get("sha")
    if not (isinstance(sha_a, str) and isinstance(sha_b, str) and sha_a and sha_b):
        return section
    if sha_a == sha_b:
        return section
    candidates = [repo_path] if repo_path is not None else _repo_candidates(a, b)
    repo = next((c for c in candidates if _has_commits(c, (sha_a, sha_b))), None)
    if repo is None:
        tried = ", ".join(str(c) for c in candidates) or "nothing (no repo dest or local url)"
        section.notes.append(
            f"commit history not shown: no git repository here holds both {sha_a} and {sha_b} "
            f"(tried: {tried}); point the diff at a clone that has both"
        )
        return section
    section.notes.append(f"history from the git repository at {repo}")
    forward = _git_lines(repo, "log", "--oneline", "--no-decorate", f"{sha_a}..{sha_b}")
    backward = _git_lines(repo, "log", "--oneline", "--no-decorate", f"{sha_b}..{sha_a}")
    short_a, short_b = sha_a[:12], sha_b[:12]
    if forward or not backward:
        section.blocks.append(
            Block(
                f"commits in B, not in A (git log --oneline {short_a}..{short_b}): {len(forward)}",
                forward,
            )
        )
    if backward:
        section.blocks.append(
            Block(
                f"commits in A, not in B (git log --oneline {short_b}..{short_a}): "
                f"{len(backward)} (B is behind A or diverged)",
                backward,
            )
        )
    # an explicit huge width: git abbreviates long paths to fit 80 columns otherwise
    stat = _git_lines(repo, "diff", "--stat=100000,100000", "--stat-graph-width=40", sha_a, sha_b)
    section.blocks.append(Block(f"git diff --stat {short_a} {short_b}", stat))
    return section
