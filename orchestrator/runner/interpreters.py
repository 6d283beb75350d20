"""What an interpreter answered (python, torch, pip freeze), kept for a runner's later snapshots."""

from __future__ import annotations

import json
import os
import shutil
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlsplit

# An interpreter's packages change only when its site directories do (pip writes there): within
# one runner process (a host's queue of cells) the python, torch and pip-freeze answers are reused
# while the interpreter and every directory on its sys.path keep their inode and mtime; the
# snapshot lists what it reused (probe.reused). Importing torch costs seconds per snapshot. Pip
# freeze also names each editable install's current commit: it is asked again when one of those
# checkouts, or the pinned repo's, moves (a checkout, a commit, a pull: `freeze_key`).
_INTERPRETERS = {}  # type: Dict[str, Dict[str, Any]]
_INTERPRETERS_LOCK = threading.Lock()
_REUSABLE = ("python", "torch", "pip_freeze")


def _interpreter_state(python: str, paths: Sequence[str]) -> Tuple[Any, ...]:
    """What must not change for an interpreter's cached answers to hold."""
    state: List[Tuple[str, Optional[int], Optional[int]]] = []
    for path in [shutil.which(python) or python, *paths]:
        try:
            st = os.stat(path)
            state.append((path, st.st_ino, st.st_mtime_ns))
        except OSError:
            state.append((path, None, None))
    return tuple(state)


def _file_state(path: str) -> Tuple[str, Optional[int], Optional[int]]:
    try:
        st = os.stat(path)
    except OSError:
        return (path, None, None)
    return (path, st.st_ino, st.st_mtime_ns)


def _first_line(path: str) -> str:
    """A small file's first line, stripped; "" when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().strip()
    except OSError:
        return ""


def checkout_state(project: str) -> Tuple[Any, ...]:
    """What a checkout, a commit or a pull in `project` rewrites: .git/HEAD, the branch ref it
    names, packed-refs (a worktree's or submodule's `.git` file is followed)."""
    git = os.path.join(project, ".git")
    if os.path.isfile(git):
        line = _first_line(git)
        if line.startswith("gitdir:"):
            git = os.path.join(project, line[len("gitdir:") :].strip())
    head = os.path.join(git, "HEAD")
    parts: List[Any] = [_file_state(head)]
    text = _first_line(head)
    if text.startswith("ref: "):
        parts.append(_file_state(os.path.join(git, text[len("ref: ") :])))
    parts.append(_file_state(os.path.join(git, "packed-refs")))
    return tuple(parts)


def editable_projects(paths: Sequence[str]) -> List[str]:
    """The project folders of the editable installs in these sys.path folders: PEP 610's
    direct_url.json (`dir_info.editable`) and setuptools' older `.egg-link` files."""
    found: List[str] = []
    for folder in paths:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                if name.endswith(".dist-info"):
                    with open(os.path.join(path, "direct_url.json"), encoding="utf-8") as fh:
                        doc = json.load(fh)
                    url = doc.get("url", "") if isinstance(doc, dict) else ""
                    info = doc.get("dir_info") if isinstance(doc, dict) else None
                    if isinstance(info, dict) and info.get("editable") and url.startswith("file:"):
                        found.append(unquote(urlsplit(url).path))
                elif name.endswith(".egg-link"):
                    found.append(_first_line(path))
            except (OSError, ValueError):
                continue
    return sorted(set(p for p in found if p))


def freeze_key(paths: Sequence[str], repo_dir: Optional[str]) -> Tuple[Any, ...]:
    """What pip freeze rests on beyond the site folders: the checkouts of the editable installs
    and of the pinned repo, since pip lists an editable install with its current commit."""
    projects = editable_projects(paths) + ([repo_dir] if repo_dir else [])
    return tuple((p, checkout_state(p)) for p in sorted(set(projects)))


def cached_answers(python: str, pip_freeze: bool, repo_dir: Optional[str] = None) -> Dict[str, Any]:
    """The reusable items of an earlier snapshot of `python` that still hold, else {}."""
    with _INTERPRETERS_LOCK:
        entry = _INTERPRETERS.get(python)
    if not entry or _interpreter_state(python, entry["paths"]) != entry["state"]:
        return {}
    answers = dict(entry["answers"])
    if not pip_freeze or not isinstance(answers.get("pip_freeze"), list):
        answers.pop("pip_freeze", None)  # off now (said so), or taken while it was off
    if entry.get("freeze") != freeze_key(entry["paths"], repo_dir):
        answers.pop("pip_freeze", None)  # a checkout moved: its editable line may differ
    return answers


def remember_answers(
    python: str, results: Dict[str, Any], pip_freeze: bool, repo_dir: Optional[str] = None
) -> None:
    """Keep `results`' reusable items for `python`, with the state they hold for."""
    info = results.get("python")
    paths = info.get("path") if isinstance(info, dict) else None
    if not isinstance(paths, list):
        return
    paths = [str(p) for p in paths if p]
    answers = {k: results[k] for k in _REUSABLE if k != "pip_freeze" or pip_freeze}
    with _INTERPRETERS_LOCK:
        _INTERPRETERS[python] = {
            "paths": paths,
            "state": _interpreter_state(python, paths),
            "answers": answers,
            "freeze": freeze_key(paths, repo_dir),
        }
