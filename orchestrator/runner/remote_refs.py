"""What an origin's branches and tags point at now, asked with `git ls-remote`.

Used on the controller (`execute/refs.py`) and, when the controller cannot reach the origin, on
a host through `runner.pyz resolve URL REF...`: both give the same answer by the same rules.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from orchestrator.runner.probe.tools import Absent, run_command

# A ref written as hex of 7 to 40 digits is a commit name, never resolved on the origin
# (ls-remote lists refs, not commits): a full SHA is already pinned, a short one is expanded by
# the host's clone.
_HEX_RE = re.compile(r"^[0-9a-fA-F]{7,40}$")
_FULL_SHA_RE = re.compile(r"^[0-9a-fA-F]{40}$")
LS_REMOTE_TIMEOUT = 60.0


def is_commit_name(ref: str) -> bool:
    """True for a short or full hexadecimal SHA (7 to 40 digits)."""
    return _HEX_RE.match(ref) is not None


def is_full_sha(ref: str) -> bool:
    """True for a full 40-digit SHA."""
    return _FULL_SHA_RE.match(ref) is not None


def remote_ref_names(ref: str) -> List[str]:
    """The origin's ref names `ref` may stand for, the first that exists winning.

    A branch before a tag of the same name, as the repo step has always resolved it
    (`origin/NAME` before `NAME`); `HEAD` and `refs/...` name themselves.
    """
    if ref == "HEAD" or ref.startswith("refs/"):
        return [ref]
    return ["refs/heads/" + ref, "refs/tags/" + ref]


def list_remote_refs(
    url: str, refs: List[str], cwd: str, timeout: float = LS_REMOTE_TIMEOUT
) -> Tuple[Optional[Dict[str, str]], str]:
    """({ref name: commit SHA}, "") of the origin's refs that `refs` may name, or (None, why).

    Annotated tags are peeled to their commit (`^{}`). git never prompts (no terminal, no
    credential prompt): an origin that needs a password it does not have is unreachable here.
    """
    patterns: List[str] = []
    for ref in refs:
        for name in remote_ref_names(ref):
            patterns += [name, name + "^{}"]
    if url.startswith("-"):
        # A relative path (git clone takes it after `--`; ls-remote refuses a name so spelled).
        url = "./" + url
    try:
        # Its own session (run_command): no terminal for ssh to prompt on, the group killable.
        rc, out, err = run_command(["git", "ls-remote", "--", url, *patterns], timeout, cwd=cwd)
    except Absent as exc:
        return None, "git ls-remote gave no answer: %s" % exc
    if rc != 0:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        why = lines[0] if lines else "rc %d" % rc
        return None, "git ls-remote failed: %s" % why.replace("fatal: ", "")
    listed: Dict[str, str] = {}
    for line in out.splitlines():
        sha, _tab, name = line.partition("\t")
        if sha and name:
            listed[name] = sha
    peeled = {n[: -len("^{}")]: s for n, s in listed.items() if n.endswith("^{}")}
    return {n: peeled.get(n, s) for n, s in listed.items() if not n.endswith("^{}")}, ""


def pick_ref(listed: Dict[str, str], ref: str) -> Optional[Tuple[str, str]]:
    """(commit SHA, full ref name) that `ref` names in `listed`, or None when none does."""
    for name in remote_ref_names(ref):
        if name in listed:
            return listed[name], name
    return None
