"""What an interpreter answered (python, torch, pip freeze), kept for a runner's later snapshots."""

from __future__ import annotations

import os
import shutil
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

# An interpreter's packages change only when its site directories do (pip writes there): within
# one runner process (a host's queue of cells) the python, torch and pip-freeze answers are reused
# while the interpreter and every directory on its sys.path keep their inode and mtime; the
# snapshot lists what it reused (probe.reused). Importing torch costs seconds per snapshot.
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


def repo_key(repo_dir: Optional[str]) -> Any:
    """What pip freeze also rests on: the pinned checkout's HEAD file (git rewrites it on every
    checkout), since an editable install of that repo is listed with its commit."""
    if not repo_dir:
        return None
    try:
        st = os.stat(os.path.join(repo_dir, ".git", "HEAD"))
    except OSError:
        return None
    return (repo_dir, st.st_ino, st.st_mtime_ns)


def cached_answers(python: str, pip_freeze: bool, repo_dir: Optional[str] = None) -> Dict[str, Any]:
    """The reusable items of an earlier snapshot of `python` that still hold, else {}."""
    with _INTERPRETERS_LOCK:
        entry = _INTERPRETERS.get(python)
    if not entry or _interpreter_state(python, entry["paths"]) != entry["state"]:
        return {}
    answers = dict(entry["answers"])
    if pip_freeze and not isinstance(answers.get("pip_freeze"), list):
        answers.pop("pip_freeze", None)  # taken while pip_freeze was off: take it now
    if entry.get("repo") != repo_key(repo_dir):
        answers.pop("pip_freeze", None)  # another checkout: its editable line may differ
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
            "repo": repo_key(repo_dir),
        }
