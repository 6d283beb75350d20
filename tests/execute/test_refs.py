"""Issue 10 item 0: what ran is what was asked. A branch or tag is resolved on the origin as it
is now, once per run, and every cell runs that commit: a tag moved with `git tag -f`, an origin
rebuilt with a new history and a branch moved on all run the origin's commit, never the clone's
stale one. Real git repositories, the real CLI, the local transport."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cell import Cell, RepoPin, cell_id
from orchestrator.config.host import Host, Inventory
from orchestrator.errors import InputError
from orchestrator.execute.bisect.run import commit_range
from orchestrator.execute.refs import pin_refs, pin_revision
from orchestrator.execute.transport.connect import connect
from orchestrator.plan.build import cell_spec

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
DEST = "src/refs-demo"
_OLD_REPO_KEYS = ("url", "dest", "version", "setup", "dirty", "setup_timeout")


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; its stdout."""
    out = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.strip()


def commit(repo: Path, text: str) -> str:
    """One more commit on the checked-out branch; its full SHA."""
    (repo / "server.txt").write_text(text)
    git(repo, "add", "server.txt")
    git(repo, "commit", "-q", "-m", text)
    return git(repo, "rev-parse", "HEAD")


def new_origin(path: Path, texts: list[str]) -> list[str]:
    """A fresh repository at `path` with one commit per text on main; the SHAs."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return [commit(path, t) for t in texts]


def orch(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp / "home").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=tmp,
        env={**os.environ, "HOME": str(tmp / "home")},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def write_playbook(tmp: Path, url: str, version: str, **repo: Any) -> None:
    playbook = {
        "name": "refs",
        "matrix": {"x": [1, 2]},
        "repo": {"url": url, "dest": DEST, "version": version, **repo},
        "bench": {
            "command": ["{{ orch_python }}", "-c", "print('x 1.0')"],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp / "playbook.yml").write_text(yaml.safe_dump(playbook))


def apply(tmp: Path, *extra: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`orch apply playbook.yml` into tmp/results; the new run's folder and the process."""
    before = set((tmp / "results").glob("*")) if (tmp / "results").is_dir() else set()
    proc = orch(tmp, "apply", "playbook.yml", "--results", "results", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in set((tmp / "results").glob("*")) - before if p.is_dir()]
    return run, proc


def repo_records(run: Path) -> dict[str, dict[str, Any]]:
    """{cell id: repo.json} of a run bundle."""
    return {d.name: json.loads((d / "repo.json").read_text()) for d in (run / "cells").iterdir()}


def planned(run: Path) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads((run / "plan.json").read_text())["cells"]
    return cells


@pytest.mark.slow
def test_a_moved_tag_runs_the_origins_new_commit_in_every_cell(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    old, _ = new_origin(origin, ["v1", "v2"])
    git(origin, "tag", "nightly", old)
    write_playbook(tmp_path, str(origin), "nightly")
    first, _ = apply(tmp_path)
    assert {r["sha"] for r in repo_records(first).values()} == {old}

    moved = commit(origin, "v3")
    git(origin, "tag", "-f", "nightly")  # the clone still has nightly at `old`
    second, proc = apply(tmp_path)
    records = repo_records(second)
    assert set(records) == set(repo_records(first))  # same ids: the requested ref is hashed
    for info in records.values():
        assert info["sha"] == info["resolved"] == moved
        assert info["requested"] == "nightly" and info["resolved_by"] == "controller"
        assert isinstance(info["resolved_at"], float)
    for cell in planned(second):  # the bundle says what ran: requested -> pinned
        assert cell["repo"]["version"] == moved and cell["repo"]["requested"] == "nightly"
    assert f"'nightly' at {origin}: refs/tags/nightly -> {moved}" in proc.stderr
    assert git(tmp_path / "home" / DEST, "rev-parse", "nightly") == moved  # forced


@pytest.mark.slow
def test_a_rebuilt_origin_and_a_moved_branch_are_followed(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    old = new_origin(origin, ["a", "b"])[-1]
    git(origin, "tag", "bad")
    write_playbook(tmp_path, origin.as_uri(), "bad")
    first, _ = apply(tmp_path)
    assert {r["sha"] for r in repo_records(first).values()} == {old}

    shutil.rmtree(origin)  # rebuilt with a new history: `bad` names a commit the clone lacks
    rebuilt = new_origin(origin, ["c", "d", "e"])[-1]
    git(origin, "tag", "bad")
    second, _ = apply(tmp_path)
    assert {r["sha"] for r in repo_records(second).values()} == {rebuilt}

    write_playbook(tmp_path, origin.as_uri(), "main")
    ahead = commit(origin, "f")
    third, _ = apply(tmp_path)
    assert {r["sha"] for r in repo_records(third).values()} == {ahead}


@pytest.mark.slow
def test_fetch_never_uses_the_clones_tag_and_says_so(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    old = new_origin(origin, ["a"])[-1]
    git(origin, "tag", "nightly")
    write_playbook(tmp_path, str(origin), "nightly")
    apply(tmp_path)
    commit(origin, "b")
    git(origin, "tag", "-f", "nightly")

    write_playbook(tmp_path, str(origin), "nightly", fetch="never")
    plan = orch(tmp_path, "plan", "playbook.yml")
    assert plan.returncode == 0, plan.stderr
    assert "repo.fetch is never" in plan.stdout
    run, _ = apply(tmp_path)
    for info in repo_records(run).values():
        assert info["sha"] == old and info["fetch"] == "never" and info["fetched"] is False
        assert "nothing fetched" in info["fetch_note"]


def test_plan_shows_what_each_ref_resolves_to(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    first, head = new_origin(origin, ["a", "b"])
    git(origin, "tag", "-a", "-m", "release", "v1", first)  # annotated: its commit is shown
    write_playbook(tmp_path, str(origin), "{{ matrix.ver }}")
    playbook = yaml.safe_load((tmp_path / "playbook.yml").read_text())
    playbook["matrix"] = {"ver": ["v1", "main", first[:10]]}
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))

    proc = orch(tmp_path, "plan", "playbook.yml")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("repo.version ")]
    assert len(lines) == 3, proc.stdout  # one per distinct (url, ref)
    assert f"'v1' at {origin}: refs/tags/v1 -> {first} (resolved by controller" in lines[0]
    assert f"'main' at {origin}: refs/heads/main -> {head} (resolved by controller" in lines[1]
    assert "a short SHA: each host expands it" in lines[2]
    assert f"v1 ({first[:12]})" in proc.stdout  # the table's repo version column

    as_json = orch(tmp_path, "plan", "playbook.yml", "--json")
    cells = json.loads(as_json.stdout)
    pins = {c["axes"]["ver"]: c["repo"] for c in cells}
    assert pins["v1"]["version"] == first and pins["v1"]["requested"] == "v1"
    assert pins["v1"]["resolved_by"] == "controller"
    assert pins["main"]["version"] == head
    assert pins[first[:10]]["version"] == first[:10] and pins[first[:10]]["requested"] is None


def test_a_ref_the_origin_lacks_is_refused_naming_the_key(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    new_origin(origin, ["a"])
    write_playbook(tmp_path, str(origin), "no-such-tag")
    for command in (["plan"], ["apply", "--results", "results"]):
        proc = orch(tmp_path, *command, "playbook.yml")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.splitlines()
        assert "playbook.yml:" in line and "repo.version: 'no-such-tag' is no branch or tag" in line
        assert str(origin) in line
    assert not (tmp_path / "results").exists()  # nothing ran


def test_an_unreachable_origin_is_named_without_its_password(tmp_path: Path) -> None:
    url = "https://someone:Pa55w0rd-xyz@127.0.0.1:1/nonexist.git"
    write_playbook(tmp_path, url, "main")
    proc = orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    # The origin answered nobody: each cell's repo step fails with git's reason, in the bundle.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not pinned: nobody reached the origin (the controller: git ls-remote" in proc.stderr
    assert "host localhost:" in proc.stderr
    assert "https://***REDACTED***@127.0.0.1:1/nonexist.git" in proc.stderr
    # What the pin printed (the repo step's own clone line is issue 10 item 3's to mask).
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("repo.version ")]
    assert "Pa55w0rd" not in line


@pytest.mark.slow
def test_a_resumed_run_keeps_the_commit_of_its_first_start(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    old = new_origin(origin, ["a"])[-1]
    git(origin, "tag", "nightly")
    write_playbook(tmp_path, str(origin), "nightly")
    run, _ = apply(tmp_path)
    redo = sorted(repo_records(run))[1]
    # That cell never finished: gone from the bundle and from the host.
    shutil.rmtree(run / "cells" / redo)
    for leftover in (tmp_path / "home" / ".orch" / "runs" / run.name).glob(f"{redo}*"):
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    commit(origin, "b")
    git(origin, "tag", "-f", "nightly")

    proc = orch(tmp_path, "apply", "playbook.yml", "--results", "results", "--resume", run.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"kept from the first start of run {run.name}" in proc.stderr
    records = repo_records(run)
    assert records[redo]["sha"] == old and records[redo]["requested"] == "nightly"


def test_the_pin_never_changes_a_cell_id(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    head = new_origin(origin, ["a"])[-1]
    inventory = Inventory(
        hosts={"h": Host(name="h", vars={}, groups=(), connection="local")}, groups={}
    )
    pin = RepoPin(url=str(origin), dest=DEST, version="main")
    cell = Cell.model_validate(
        {"id": "1-x", "playbook": "p", "host": "h", "axes": {"x": 1}, "repo": pin,
         "bench": {"argv": ["true"]}}
    )  # fmt: skip
    # The id an orch without fetch/requested/resolved_* gave this cell.
    before = cell_spec(cell)
    before["repo"] = {k: v for k, v in before["repo"].items() if k in _OLD_REPO_KEYS}
    (pinned,), (res,) = pin_refs([cell], inventory)
    assert pinned.repo is not None and pinned.repo.version == head and res.sha == head
    assert cell_id(pinned.axes, "h", cell_spec(pinned)) == cell_id(cell.axes, "h", before)
    never = cell.model_copy(update={"repo": pin.model_copy(update={"fetch": "never"})})
    assert cell_id(never.axes, "h", cell_spec(never)) == cell_id(cell.axes, "h", before)

    missing = cell.model_copy(update={"repo": pin.model_copy(update={"version": "gone"})})
    with pytest.raises(InputError, match="'gone' is no branch or tag") as caught:
        pin_refs([missing], inventory)
    assert caught.value.key_path == "repo.version" and caught.value.exit_code == 2


def test_bisect_ends_are_the_origins_not_the_clones_stale_tags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    origin = tmp_path / "origin"
    shas = new_origin(origin, ["a", "b", "c"])
    git(origin, "tag", "good", shas[0])
    git(origin, "tag", "bad", shas[-1])
    git(tmp_path, "clone", "-q", str(origin), str(home / DEST))  # holds good and bad as they were
    shutil.rmtree(origin)  # rebuilt: the old commits no longer exist upstream
    rebuilt = new_origin(origin, ["d", "e", "f", "g"])
    git(origin, "tag", "good", rebuilt[0])
    git(origin, "tag", "bad", rebuilt[-1])

    host = Host(name="localhost", vars={}, groups=(), connection="local")
    inventory = Inventory(hosts={"localhost": host}, groups={})
    pin = RepoPin(url=str(origin), dest=DEST, version="main")
    cell = Cell.model_validate(
        {"id": "1-x", "playbook": "p", "host": "localhost", "axes": {"x": 1}, "repo": pin,
         "bench": {"argv": ["true"]}}
    )  # fmt: skip
    pinned = {}
    for key, ref in (("--good", "good"), ("--bad", "bad")):
        res = pin_revision(cell, inventory, ref, key_path=key)
        assert res is not None and res.sha is not None
        pinned[ref] = res.sha
    assert pinned == {"good": rebuilt[0], "bad": rebuilt[-1]}
    conn = connect(host)
    try:
        assert commit_range(conn, cell, "good", "bad", True, pinned) == rebuilt
    finally:
        conn.close()
    assert git(home / DEST, "rev-parse", "bad") == rebuilt[-1]  # tags fetched with force

    with pytest.raises(InputError, match="'nope' is no branch or tag") as caught:
        pin_revision(cell, inventory, "nope", key_path="--bad")
    assert caught.value.key_path == "--bad"
    assert pin_revision(cell, inventory, "bad~1", key_path="--bad") is None  # the host's to say


@pytest.mark.slow
@pytest.mark.ssh
def test_hosts_over_ssh_run_the_one_commit_their_first_host_resolved(
    tmp_path: Path, ssh_hosts: Any, ssh_inventory: Path
) -> None:
    origin = tmp_path / "origin"
    old = new_origin(origin, ["a"])[-1]
    git(origin, "tag", "nightly")
    clones = tmp_path / "clones"
    for host in ssh_hosts.hosts:  # every host's clone holds the tag as it was
        git(tmp_path, "clone", "-q", str(origin), str(clones / host.name))
    moved = commit(origin, "b")
    git(origin, "tag", "-f", "nightly")
    # A local path names a repository on the hosts: the controller leaves it to the first host.
    write_playbook(tmp_path, str(origin), "nightly")
    playbook = yaml.safe_load((tmp_path / "playbook.yml").read_text())
    playbook["matrix"] = {"x": [1]}
    playbook["repo"]["dest"] = str(clones) + "/{{ inventory_hostname }}"
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    first = ssh_hosts.hosts[0].name

    run, proc = apply(tmp_path, "-i", str(ssh_inventory))
    assert f"(resolved by host {first} at" in proc.stderr, proc.stderr
    records = repo_records(run)
    assert len(records) == len(ssh_hosts.hosts)
    for info in records.values():
        assert info["sha"] == moved != old and info["resolved_by"] == f"host {first}"
