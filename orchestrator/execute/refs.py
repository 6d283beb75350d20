"""Refs pinned once per run: each (repo.url, branch or tag) is resolved on its origin as it is
now, and every cell and host of the run checks out that one commit.

Asked with `git ls-remote` on the controller; when the controller cannot reach the origin (or
the URL is a path on the hosts), the first host of the run that uses it is asked through
`runner.pyz resolve`. A commit name (short or full SHA) is left to the hosts' clones, a
`repo.fetch: never` repo to each host's clone as it is. A resumed run keeps the commits its
first start pinned (read from the bundle's plan.json), so one run never mixes two.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Host, Inventory
from orchestrator.errors import InputError, OrchError, SourceLocation
from orchestrator.execute.ship import ensure_runner
from orchestrator.execute.transport.connect import Connection, connect
from orchestrator.results.documents import recorded_plan_cells
from orchestrator.runner.protocol import home_dir
from orchestrator.runner.remote_refs import is_commit_name, list_remote_refs, pick_ref
from orchestrator.runner.repo import is_local_repo_url, masked_url

RefKey = tuple[str, str]  # (repo.url, ref as requested)
HostAnswer = tuple[dict[str, tuple[str, str] | None] | None, str]  # ({ref: (sha, name)}, why)
# git's revision syntax beyond a plain ref name (HEAD~2, v1^, main@{1}, a..b): not a ref the
# origin lists, so the hosts' clones resolve it after a fetch.
_REVISION_SYNTAX = re.compile(r"[~^:?*\[\\\s]|@\{|\.\.")
HOSTS_ASKED = 3  # hosts asked in turn when the controller cannot reach an origin
_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")


@dataclass(frozen=True)
class Resolution:
    """What one requested ref of one repository names for this run."""

    url: str
    ref: str
    sha: str | None  # None: not pinned here (see `note`)
    remote_ref: str | None = None  # the origin's full ref name (refs/tags/bad)
    at: float | None = None  # epoch seconds
    by: str | None = None  # "controller" or "host NAME"
    note: str = ""

    def describe(self) -> str:
        """One line for a person: the ref, where it points and who said so (no credentials)."""
        head = f"{self.ref!r} at {masked_url(self.url)}"
        if self.sha is None:
            return f"{head}: {self.note}"
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)) if self.at else "?"
        names = f"{self.remote_ref} -> " if self.remote_ref else ""
        text = f"{head}: {names}{self.sha} (resolved by {self.by} at {when})"
        return text + (f"; {self.note}" if self.note else "")

    def to_json(self) -> dict[str, Any]:
        """The resolution as plain data (url without credentials)."""
        return {
            "url": masked_url(self.url),
            "ref": self.ref,
            "sha": self.sha,
            "remote_ref": self.remote_ref,
            "resolved_at": self.at,
            "resolved_by": self.by,
            "note": self.note,
        }


def is_plain_ref(ref: str) -> bool:
    """True when `ref` is a name the origin may list (a branch, a tag, HEAD, refs/...)."""
    return not is_commit_name(ref) and not _REVISION_SYNTAX.search(ref) and not ref.startswith("-")


def pin_refs(
    cells: Sequence[Cell],
    inventory: Inventory,
    *,
    earlier: Mapping[RefKey, Resolution] | None = None,
    ask_hosts: bool = True,
    location: SourceLocation | None = None,
    conn_factory: Callable[[Host], Connection] = connect,
) -> tuple[list[Cell], list[Resolution]]:
    """`cells` with every branch or tag pinned to the commit it names now, and one Resolution
    per distinct (url, ref), in the order the cells first use them.

    `earlier` (a resumed run's first pins) wins over asking again. Without `ask_hosts` (`orch
    plan`) only the controller asks; what it cannot reach is left unpinned, with a note. A ref
    the origin does not have is an InputError naming the key; one nobody reaches stays unpinned
    (see `resolve_refs`).
    """
    order: dict[RefKey, list[str]] = {}  # (url, ref) -> hosts using it, in run order
    found: dict[RefKey, Resolution] = {}
    shown: dict[RefKey, Resolution] = {}  # what is said of each (url, ref), in order
    for cell in cells:
        repo = cell.repo
        if repo is None or repo.requested is not None:
            continue
        key = (repo.url, repo.version)
        if repo.fetch == "never":  # per host when templated: other hosts may still fetch
            note = "not resolved: repo.fetch is never, each host uses its clone's ref as it is"
            shown.setdefault(key, Resolution(repo.url, repo.version, None, note=note))
            continue
        shown.setdefault(key, Resolution(repo.url, repo.version, None))  # replaced below
        hosts = order.setdefault(key, [])
        if cell.host not in hosts:
            hosts.append(cell.host)
        if key in found:
            continue
        if is_commit_name(repo.version):
            note = "a full SHA" if len(repo.version) == 40 else "a short SHA: each host expands it"
            found[key] = Resolution(repo.url, repo.version, None, note=note)
        elif not is_plain_ref(repo.version):
            note = "a revision expression: each host resolves it after a fetch"
            found[key] = Resolution(repo.url, repo.version, None, note=note)
        elif earlier and key in earlier:
            found[key] = earlier[key]
    by_url: dict[str, list[str]] = {}
    for url, ref in order:
        if (url, ref) not in found:
            by_url.setdefault(url, []).append(ref)
    for url, refs in by_url.items():
        hosts = [h for (u, _r), hs in order.items() if u == url for h in hs]
        found.update(
            resolve_refs(
                url,
                refs,
                [inventory.hosts[h] for h in dict.fromkeys(hosts)],
                ask_hosts=ask_hosts,
                location=location,
                conn_factory=conn_factory,
            )
        )
    pinned: list[Cell] = []
    for cell in cells:
        repo = cell.repo
        res = found.get((repo.url, repo.version)) if repo is not None else None
        if repo is None or res is None or res.sha is None or repo.fetch == "never":
            pinned.append(cell)
            continue
        pin = {
            "version": res.sha,
            "requested": res.ref,
            "resolved_at": res.at,
            "resolved_by": res.by,
        }
        pinned.append(cell.model_copy(update={"repo": repo.model_copy(update=pin)}))
    return pinned, [found.get(k, res) for k, res in shown.items()]


def resolve_refs(
    url: str,
    refs: Sequence[str],
    hosts: Sequence[Host],
    *,
    ask_hosts: bool = True,
    location: SourceLocation | None = None,
    key_path: str = "repo.version",
    conn_factory: Callable[[Host], Connection] = connect,
) -> dict[RefKey, Resolution]:
    """What each of `refs` names at `url` now: asked on the controller, else of the hosts in
    turn (the first `HOSTS_ASKED`).

    The controller does not ask for a local path unless every host is this machine (a path
    names a repository on the host). InputError when a ref is not the origin's (exit 2,
    naming `key_path` and the URL) or when neither the controller nor the host reach it.
    """
    reasons: list[str] = []
    answer: dict[str, tuple[str, str] | None] | None = None
    by = "controller"
    if not is_local_repo_url(url) or all(h.connection == "local" for h in hosts):
        listed, why = list_remote_refs(url, list(refs), home_dir())
        if listed is not None:
            answer = {ref: pick_ref(listed, ref) for ref in refs}
        else:
            reasons.append(f"the controller: {_masked(why, url)}")
    else:
        reasons.append("the controller: a local path names a repository on the hosts")
    for host in hosts[:HOSTS_ASKED] if ask_hosts else ():
        if answer is not None:
            break
        by = f"host {host.name}"
        answer, why = _ask_host(host, url, refs, conn_factory)
        if answer is None:
            reasons.append(f"{by}: {_masked(why, url)}")
    if answer is None:
        # Not an input error: the hosts' repo steps try again and fail with git's reason,
        # recorded in the bundle for each cell (a host may reach what the controller cannot).
        why = "; ".join(reasons)
        if ask_hosts:
            note = f"not pinned: nobody reached the origin ({why}); each host's repo step tries"
        else:
            note = f"not resolved here ({why}); `orch apply` asks the hosts"
        return {(url, ref): Resolution(url, ref, None, note=note) for ref in refs}
    at = time.time()
    out: dict[RefKey, Resolution] = {}
    for ref in refs:
        hit = answer.get(ref)
        if hit is None:
            raise InputError(
                f"{ref!r} is no branch or tag of {masked_url(url)} (asked by {by})",
                location=location,
                key_path=key_path,
                hint="a branch, a tag, HEAD, refs/..., or a commit SHA",
            )
        out[(url, ref)] = Resolution(url, ref, hit[0], hit[1], at, by)
    return out


def _ask_host(
    host: Host, url: str, refs: Sequence[str], conn_factory: Callable[[Host], Connection]
) -> HostAnswer:
    """`runner.pyz resolve` on `host`: ({ref: (sha, name) or None}, "") or (None, why)."""
    try:
        conn = conn_factory(host)
    except OrchError as exc:
        return None, f"cannot connect: {exc.message}"
    try:
        runner = ensure_runner(conn)
        res = conn.run([host.python, runner, "resolve", "--", url, *refs], timeout=120)
    except OrchError as exc:
        return None, exc.message
    finally:
        conn.close()
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        return None, f"runner.pyz resolve failed (rc {res.rc}): {res.stderr.strip()[-300:]}"
    if not isinstance(doc, dict) or not doc.get("ok"):
        reason = doc.get("reason") if isinstance(doc, dict) else None
        return None, str(reason or f"runner.pyz resolve failed (rc {res.rc})")
    found = doc.get("refs") or {}
    answer: dict[str, tuple[str, str] | None] = {}
    for ref in refs:
        item = found.get(ref)
        if isinstance(item, dict) and isinstance(item.get("sha"), str):
            answer[ref] = (item["sha"], str(item.get("ref")))
        else:
            answer[ref] = None
    return answer, ""


def recorded_resolutions(run_dir: Path) -> dict[RefKey, Resolution]:
    """The pins a run's first start recorded (plan.json), for a resume to keep."""
    out: dict[RefKey, Resolution] = {}
    for cell in recorded_plan_cells(run_dir) or []:
        repo = cell.get("repo")
        if not isinstance(repo, dict) or not repo.get("requested") or not repo.get("version"):
            continue
        key = (str(repo.get("url")), str(repo["requested"]))
        at, by = repo.get("resolved_at"), repo.get("resolved_by")
        out.setdefault(
            key,
            Resolution(
                key[0],
                key[1],
                str(repo["version"]),
                remote_ref=None,
                at=float(at) if isinstance(at, int | float) else None,
                by=str(by) if by else None,
                note=f"kept from the first start of run {run_dir.name}",
            ),
        )
    return out


def _masked(text: str, url: str) -> str:
    """`text` (git's message) without the credentials of `url` or of any URL in it."""
    return _CREDENTIALS.sub(r"\1***@", text.replace(url, masked_url(url)))


def pin_revision(
    cell: Cell,
    inventory: Inventory,
    ref: str,
    *,
    key_path: str,
    conn_factory: Callable[[Host], Connection] = connect,
) -> Resolution | None:
    """A revision of `cell`'s repo (bisect's --good, --bad) pinned as its version would be;
    None when it is left to the host (a SHA, a revision expression, `repo.fetch: never`)."""
    repo = cell.repo
    if repo is None or repo.fetch == "never" or not is_plain_ref(ref):
        return None
    host = inventory.hosts[cell.host]
    found = resolve_refs(repo.url, [ref], [host], key_path=key_path, conn_factory=conn_factory)
    return found[(repo.url, ref)]
