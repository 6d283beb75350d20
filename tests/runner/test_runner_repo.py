"""Pinning the serving repo and caching its setup, against real git repositories."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runner_helpers import cell_dir, load, make_cell, run_cell

from orchestrator.cell import RepoPin
from orchestrator.runner.repo import repo_url_key

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` and return its stdout."""
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


def commit(repo: Path, name: str, text: str) -> str:
    """Write a file, commit it, return the full SHA."""
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"change {name}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """A real origin repository with two commits on main."""
    repo = tmp_path / "origin"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "server.txt", "v1\n")
    commit(repo, "README", "demo\n")
    return repo


def repo_cell(
    url: str, version: str, cell_id: str = "x-1-0000abcd", **repo: object
) -> dict[str, object]:
    pin = RepoPin(url=url, dest="src/demo", version=version, **repo)  # type: ignore[arg-type]
    return make_cell(
        None,
        cell_id=cell_id,
        repo=pin,
        env={"MYVAR": "x y"},
        repeats=1,
        bench_argv=(sys.executable, "-c", "print('bench ok')"),
    )


def test_clone_pin_and_setup_cache(home: Path, origin: Path) -> None:
    first_sha = git(origin, "rev-list", "--max-parents=0", "HEAD")
    second_sha = git(origin, "rev-parse", "HEAD")
    setup = 'echo "setup ran with $MYVAR" >> "$HOME/setup-runs"; echo built'
    runner = run_cell(home, repo_cell(str(origin), first_sha[:8], setup=setup))
    assert runner.done["status"] == "passed", runner.done
    dest = home / "src" / "demo"
    assert git(dest, "rev-parse", "HEAD") == first_sha
    assert (dest / "server.txt").read_text() == "v1\n" and not (dest / "README").exists()
    info = load(cell_dir(home) / "repo.json")
    assert info["requested"] == first_sha[:8] and info["sha"] == first_sha
    assert info["dirty"] is False and info["dirty_action"] == "none"
    assert info["fetched"] is False and info["describe"] == first_sha[:7]
    assert info["reflog"] and len(info["reflog"]) <= 50
    ok_step = [e for e in runner.events if e.get("step") == "repo" and e["status"] == "ok"]
    assert ok_step[0]["detail"]["sha"] == first_sha
    assert "built" in (cell_dir(home) / "setup.log").read_text()
    assert (home / "setup-runs").read_text() == "setup ran with x y\n"
    assert len(list((home / ".orch" / "setup-cache").glob("*.ok"))) == 1

    again = run_cell(home, repo_cell(str(origin), first_sha, "y-2-0000beef", setup=setup))
    assert again.done["status"] == "passed"
    assert (cell_dir(home, "y-2-0000beef") / "setup.log").read_text().startswith("cached")
    assert (home / "setup-runs").read_text() == "setup ran with x y\n"

    # Another commit is another setup.
    other = run_cell(home, repo_cell(str(origin), second_sha, "z-3-0000cafe", setup=setup))
    assert other.done["status"] == "passed"
    assert len((home / "setup-runs").read_text().splitlines()) == 2
    assert git(dest, "rev-parse", "HEAD") == second_sha


def test_failing_setup_is_not_cached(home: Path, origin: Path) -> None:
    setup = "echo nope; exit 4"
    runner = run_cell(home, repo_cell(str(origin), "main", setup=setup))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "setup"
    assert done["reason"].startswith("setup failed (rc 4)") and "nope" in done["reason"]
    assert not list((home / ".orch" / "setup-cache").glob("*.ok"))
    again = run_cell(home, repo_cell(str(origin), "main", "y-2-0000beef", setup=setup))
    assert again.done["step"] == "setup"
    assert (cell_dir(home, "y-2-0000beef") / "setup.log").read_text() == "nope\n"


@pytest.mark.parametrize("policy", ["refuse", "reset", "record"])
def test_dirty_tree_policies(home: Path, origin: Path, policy: str) -> None:
    assert run_cell(home, repo_cell(str(origin), "main")).done["status"] == "passed"
    dest = home / "src" / "demo"
    (dest / "server.txt").write_text("patched by hand\n")
    (dest / "junk.txt").write_text("left over\n")

    runner = run_cell(home, repo_cell(str(origin), "main", "y-2-0000beef", dirty=policy))
    done = runner.done
    if policy == "refuse":
        assert done["status"] == "failed" and done["step"] == "repo"
        assert done["reason"].startswith("repo dest is dirty: ")
        assert "server.txt" in done["reason"] and "junk.txt" in done["reason"]
        assert (dest / "junk.txt").exists()
        return
    assert done["status"] == "passed", done
    info = load(cell_dir(home, "y-2-0000beef") / "repo.json")
    assert info["dirty"] is True
    assert "junk.txt" in info["status_porcelain"] and "server.txt" in info["status_porcelain"]
    if policy == "reset":
        assert info["dirty_action"] == "reset"
        assert not (dest / "junk.txt").exists()
        assert (dest / "server.txt").read_text() == "v1\n"
        assert info["status_after"] == "" and not info["describe"].endswith("-dirty")
    else:
        assert info["dirty_action"] == "recorded"
        assert (dest / "junk.txt").exists()
        assert info["describe"].endswith("-dirty")


def test_unknown_refs_are_fetched_from_origin(home: Path, origin: Path) -> None:
    url = origin.as_uri()
    assert run_cell(home, repo_cell(url, "main")).done["status"] == "passed"
    later = commit(origin, "server.txt", "v2\n")
    git(origin, "tag", "v9")

    runner = run_cell(home, repo_cell(url, later, "y-2-0000beef"))
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "y-2-0000beef") / "repo.json")
    assert info["sha"] == later and info["fetched"] is True
    assert (home / "src" / "demo" / "server.txt").read_text() == "v2\n"

    # A branch name means the origin's branch, never a stale local one.
    newest = commit(origin, "server.txt", "v3\n")
    runner = run_cell(home, repo_cell(url, "main", "z-3-0000cafe"))
    info = load(cell_dir(home, "z-3-0000cafe") / "repo.json")
    assert info["sha"] == newest and info["resolved_from"] == "origin/main"

    runner = run_cell(home, repo_cell(url, "v9", "w-4-0000f00d"))
    info = load(cell_dir(home, "w-4-0000f00d") / "repo.json")
    assert info["sha"] == later and info["describe"] == "v9"


def test_tags_come_from_origin_only_and_a_moved_tag_is_followed(
    home: Path, origin: Path, tmp_path: Path
) -> None:
    url = origin.as_uri()
    assert run_cell(home, repo_cell(url, "main")).done["status"] == "passed"
    dest = home / "src" / "demo"
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(origin), str(other))
    commit(other, "server.txt", "theirs\n")
    git(other, "tag", "only-there")
    git(dest, "remote", "add", "other", str(other))  # a remote the user added by hand

    runner = run_cell(home, repo_cell(url, "only-there", "t-1-0000aaaa"))
    assert runner.done["status"] == "failed", runner.done
    assert runner.done["reason"].startswith("unknown ref 'only-there'")

    # origin moved its tag v1 to another commit (git tag -f): the clone's stale tag is
    # replaced (fetched with force), never used as it was
    git(origin, "tag", "v1", "HEAD~1")
    assert run_cell(home, repo_cell(url, "v1", "t-2-0000bbbb")).done["status"] == "passed"
    moved = commit(origin, "server.txt", "v2\n")
    git(origin, "tag", "-f", "v1")
    runner = run_cell(home, repo_cell(url, "v1", "t-3-0000cccc"))
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "t-3-0000cccc") / "repo.json")
    assert info["sha"] == moved and info["resolved"] == moved and info["fetched"] is True
    assert info["requested"] == "v1" and info["resolved_by"] == "host local"
    assert git(dest, "rev-parse", "v1") == moved


def test_unknown_ref_fails_clearly(home: Path, origin: Path) -> None:
    runner = run_cell(home, repo_cell(str(origin), "deadbeef"))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "repo"
    assert done["reason"].startswith("unknown ref 'deadbeef'")


def test_a_url_starting_with_a_dash_is_a_url_not_an_option(home: Path, origin: Path) -> None:
    # A relative URL (clone runs in $HOME) that git would otherwise parse as options.
    shutil.copytree(origin, home / "-o-origin")
    runner = run_cell(home, repo_cell("-o-origin", "main"))
    assert runner.done["status"] == "passed", runner.done
    assert (home / "src" / "demo" / "server.txt").read_text() == "v1\n"

    marker = home / "pwned"
    evil = repo_cell(f"--upload-pack=touch {marker}", "main", "y-2-0000beef")
    evil["repo"]["dest"] = "src/other"  # type: ignore[index]
    runner = run_cell(home, evil)
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "repo"
    assert "git clone --no-checkout -- --upload-pack=" in done["reason"]
    assert not marker.exists()


def test_a_commit_only_a_pull_ref_reaches_is_fetched_by_sha(home: Path, origin: Path) -> None:
    url = origin.as_uri()
    assert run_cell(home, repo_cell(url, "main")).done["status"] == "passed"
    git(origin, "checkout", "-q", "-b", "pr")
    pr = commit(origin, "server.txt", "pr\n")
    git(origin, "update-ref", "refs/pull/1/head", pr)
    git(origin, "checkout", "-q", "main")
    git(origin, "branch", "-q", "-D", "pr")  # only refs/pull/1/head (never fetched) reaches it

    runner = run_cell(home, repo_cell(url, pr, "y-2-0000beef"))
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "y-2-0000beef") / "repo.json")
    assert info["sha"] == pr and info["resolved_from"] == "FETCH_HEAD"


# --- a clone of another repository at dest ------------------------------------------------------


def clone_state(dest: Path) -> dict[str, str]:
    """Everything a refused cell must leave alone in a clone: config, refs, HEAD, index, files."""
    return {
        "config": (dest / ".git" / "config").read_text(),
        "refs": git(dest, "for-each-ref", "--format=%(refname) %(objectname)"),
        "head": git(dest, "rev-parse", "HEAD"),
        "status": git(dest, "status", "--porcelain", "--untracked-files=all"),
        "files": repr(sorted((p.name, p.read_text()) for p in dest.iterdir() if p.is_file())),
    }


@pytest.fixture
def fork(tmp_path: Path, origin: Path) -> Path:
    """A fork of `origin`: same history, one more commit on main, and tag v1 on its own commit."""
    repo = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(origin), str(repo))
    git(origin, "tag", "v1")
    commit(repo, "server.txt", "fork\n")
    git(repo, "tag", "v1")
    return repo


@pytest.mark.parametrize("version", ["v1", "main", "first-sha"])
def test_a_clone_of_another_repository_is_refused_and_left_alone(
    home: Path, origin: Path, fork: Path, version: str
) -> None:
    assert run_cell(home, repo_cell(str(origin), "v1")).done["status"] == "passed"
    dest = home / "src" / "demo"
    (dest / "junk.txt").write_text("work in progress\n")  # must survive even `dirty: reset`
    before = clone_state(dest)
    if version == "first-sha":
        # resolves in the old clone without a fetch: the case that used to pass silently
        version = git(origin, "rev-list", "--max-parents=0", "HEAD")

    runner = run_cell(home, repo_cell(str(fork), version, "y-2-0000beef", dirty="reset"))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "repo", done
    reason = done["reason"]
    assert "\n" not in reason
    assert reason.startswith(f"repo dest {dest} is a clone of {origin}, not of repo.url {fork};")
    assert "its own repo.dest" in reason and "remove the old clone" in reason
    assert f"git -C {dest} remote set-url origin {fork}" in reason
    assert clone_state(dest) == before
    failed = load(cell_dir(home, "y-2-0000beef") / "cell.json")
    assert failed["failed_step"] == "repo" and failed["reason"] == reason
    assert failed["steps"]["setup"]["status"] == "not_run"
    assert not (cell_dir(home, "y-2-0000beef") / "repo.json").exists()


def test_a_moved_repository_is_refused_until_the_clone_is_pointed_there(
    home: Path, origin: Path
) -> None:
    assert run_cell(home, repo_cell(str(origin), "main")).done["status"] == "passed"
    moved = origin.parent / "moved"
    origin.rename(moved)
    newest = commit(moved, "server.txt", "v2\n")
    done = run_cell(home, repo_cell(str(moved), "main", "y-2-0000beef")).done
    assert done["status"] == "failed" and done["step"] == "repo", done
    # The command the reason suggests, run as given.
    command = done["reason"].split("point the clone there: ", 1)[1]
    subprocess.run(shlex.split(command), check=True, timeout=30)
    runner = run_cell(home, repo_cell(str(moved), "main", "z-3-0000cafe"))
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "z-3-0000cafe") / "repo.json")
    assert info["sha"] == newest and info["origin_url"] == str(moved)


def test_a_missing_declared_repository_is_refused_when_dest_holds_another(
    home: Path, origin: Path
) -> None:
    assert run_cell(home, repo_cell(str(origin), "main")).done["status"] == "passed"
    dest = home / "src" / "demo"
    before = clone_state(dest)
    sha = git(origin, "rev-parse", "HEAD")
    for n, url in enumerate(["/nonexistent/repo", "file:///nonexistent/repo"]):
        cid = f"y-{n}-0000beef"
        done = run_cell(home, repo_cell(url, sha, cid)).done
        assert done["status"] == "failed" and done["step"] == "repo", done
        assert f"is a clone of {origin}, not of repo.url {url};" in done["reason"]
    assert clone_state(dest) == before


@pytest.mark.parametrize(
    "spelling", ["slash", "dotgit", "file-uri", "relative", "tilde", "symlink", "bare-dotgit"]
)
def test_the_same_repository_spelled_differently_is_accepted(
    home: Path, origin: Path, spelling: str
) -> None:
    first = git(origin, "rev-list", "--max-parents=0", "HEAD")
    if spelling == "bare-dotgit":
        # a bare origin `repo.git` named without its suffix, as git itself resolves it
        bare = origin.parent / "shared.git"
        git(origin.parent, "clone", "-q", "--bare", str(origin), str(bare))
        origin = bare
    assert run_cell(home, repo_cell(str(origin), "main")).done["status"] == "passed"
    (origin.parent / "link").symlink_to(origin)
    url = {
        "slash": f"{origin}/",
        "dotgit": f"{origin}/.git/",
        "file-uri": origin.as_uri(),
        "relative": os.path.relpath(origin, home),
        "tilde": "~/" + os.path.relpath(origin, home),
        "symlink": str(origin.parent / "link"),
        "bare-dotgit": str(origin)[: -len(".git")],
    }[spelling]
    runner = run_cell(home, repo_cell(url, first, "y-2-0000beef"))
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "y-2-0000beef") / "repo.json")
    assert info["url"] == url and info["origin_url"] == str(origin)
    assert info["sha"] == first and info["cloned"] is False


def test_a_fresh_clone_records_its_origin(home: Path, origin: Path) -> None:
    url = origin.as_uri() + "/"
    assert run_cell(home, repo_cell(url, "main")).done["status"] == "passed"
    info = load(cell_dir(home) / "repo.json")
    assert info["cloned"] is True and info["url"] == url and info["origin_url"] == url


def test_remote_urls_compare_by_git_s_rewriting_and_without_credentials(
    home: Path, origin: Path
) -> None:
    assert run_cell(home, repo_cell(str(origin), "main")).done["status"] == "passed"
    dest = home / "src" / "demo"
    # The clone fetches a "remote" URL (with an old token) that insteadOf maps to the origin.
    remote = "https://ci:oldtoken@git.example.com/team/demo.git"
    git(dest, "remote", "set-url", "origin", remote)
    git(dest, "config", f"url.{origin}.insteadOf", remote)
    newest = commit(origin, "server.txt", "v2\n")

    same = {
        "case-slash-token": "https://newtoken@GIT.Example.com/team/demo/",
        "no-suffix": "https://git.example.com/team/demo",
        "rewritten": str(origin),  # what the origin's insteadOf rule maps to
    }
    for n, url in enumerate(same.values()):
        cid = f"y-{n}-0000beef"
        runner = run_cell(home, repo_cell(url, "main", cid))
        assert runner.done["status"] == "passed", (url, runner.done)
        info = load(cell_dir(home, cid) / "repo.json")
        assert info["sha"] == newest and info["origin_url"] == str(origin)
        text = "".join(p.read_text() for p in cell_dir(home, cid).rglob("*") if p.is_file())
        assert "oldtoken" not in text and "oldtoken" not in "".join(runner.lines)

    git(dest, "config", "--unset", f"url.{origin}.insteadOf")
    for n, url in enumerate(
        ["https://git.example.com/team/other", "ssh://git@git.example.com/team/demo"]
    ):
        cid = f"z-{n}-0000cafe"
        runner = run_cell(home, repo_cell(url, "main", cid))
        done = runner.done
        assert done["status"] == "failed" and done["step"] == "repo", done
        assert (
            "is a clone of https://***REDACTED***@git.example.com/team/demo.git,"
            in (done["reason"])
        )
        assert "oldtoken" not in "".join(runner.lines)


def test_a_clone_without_origin_is_refused(home: Path, origin: Path) -> None:
    assert run_cell(home, repo_cell(str(origin), "main")).done["status"] == "passed"
    dest = home / "src" / "demo"
    git(dest, "remote", "remove", "origin")
    done = run_cell(home, repo_cell(str(origin), "main", "y-2-0000beef")).done
    assert done["status"] == "failed" and done["step"] == "repo", done
    assert done["reason"].startswith(f"repo dest {dest} is a git clone without an origin remote")


def test_a_dest_inside_another_work_tree_is_refused(home: Path, origin: Path) -> None:
    git(home, "init", "-q")  # a dotfiles repository in $HOME
    dest = home / "src" / "demo"
    dest.mkdir(parents=True)
    (dest / "notes.txt").write_text("mine\n")
    done = run_cell(home, repo_cell(str(origin), "main", dirty="record")).done
    assert done["status"] == "failed" and done["step"] == "repo", done
    assert done["reason"].startswith(
        f"repo dest {dest} is not a clone of its own: it lies inside the git work tree {home}"
    )
    assert (dest / "notes.txt").read_text() == "mine\n"
    # nothing was checked out into $HOME's repository: it still has no commit
    assert (
        subprocess.run(
            ["git", "-C", str(home), "rev-parse", "-q", "--verify", "HEAD"], capture_output=True
        ).returncode
        != 0
    )


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("https://github.com/org/repo", "https://github.com/org/repo.git/", True),
        ("https://GitHub.com/org/repo", "HTTPS://github.com/org/repo", True),
        ("https://tok@github.com/org/repo", "https://u:pw@github.com/org/repo", True),
        ("git@github.com:org/repo.git", "git@GITHUB.com:org/repo/", True),
        ("ssh://git@host/r.git", "ssh://git:pw@host/r", True),
        ("https://github.com/org/repo", "https://github.com/fork/repo", False),
        ("https://github.com/org/repo", "https://github.com/org/Repo", False),
        ("https://github.com/org/repo", "git@github.com:org/repo", False),
        ("ssh://alice@host/r", "ssh://bob@host/r", False),
        ("git@host:r", "host:r", False),
        ("host:r", "./host:r", False),
    ],
)
def test_repo_url_keys(tmp_path: Path, a: str, b: str, same: bool) -> None:
    assert (repo_url_key(a, str(tmp_path)) == repo_url_key(b, str(tmp_path))) is same


def test_a_failed_first_clone_is_finished_by_the_next_run(home: Path, origin: Path) -> None:
    bad = run_cell(home, repo_cell(str(origin), "nonexistent"))
    assert bad.done["status"] == "failed" and bad.done["step"] == "repo"
    assert "unknown ref 'nonexistent'" in bad.done["reason"]
    dest = home / "src" / "demo"
    assert (dest / ".git" / "orch-unfinished-clone").is_file()

    good = run_cell(home, repo_cell(str(origin), "main", cell_id="y-2-0000beef"))
    assert good.done["status"] == "passed", good.done
    info = load(cell_dir(home, "y-2-0000beef") / "repo.json")
    assert info["finished_earlier_clone"] is True and info["dirty"] is False
    assert info["sha"] == git(origin, "rev-parse", "main")
    assert (dest / "README").read_text() == "demo\n"
    assert not (dest / ".git" / "orch-unfinished-clone").exists()
    # Checked out once: from now on it is a clone like any other, with the dirty policy.
    (dest / "README").write_text("edited\n")
    third = run_cell(home, repo_cell(str(origin), "main", cell_id="z-3-0000cafe"))
    assert third.done["status"] == "failed" and "repo dest is dirty" in third.done["reason"]


def test_an_unfinished_clone_of_another_repository_is_redone(
    home: Path, origin: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    shutil.copytree(origin, other)
    commit(other, "other.txt", "x\n")
    bad = run_cell(home, repo_cell(str(other), "nonexistent"))
    assert bad.done["status"] == "failed"
    good = run_cell(home, repo_cell(str(origin), "main", cell_id="y-2-0000beef"))
    assert good.done["status"] == "passed", good.done
    dest = home / "src" / "demo"
    assert not (dest / "other.txt").exists()
    assert git(dest, "remote", "get-url", "origin") == str(origin)


# --- refs pinned by the controller, repo.fetch: never, runner.pyz resolve ----------------------


def test_a_pinned_commit_is_checked_out_and_the_resolution_recorded(
    home: Path, origin: Path
) -> None:
    url = origin.as_uri()
    git(origin, "tag", "nightly")
    assert run_cell(home, repo_cell(url, "nightly")).done["status"] == "passed"
    moved = commit(origin, "server.txt", "v2\n")
    git(origin, "tag", "-f", "nightly")
    # The controller pinned `nightly` to the origin's commit: the clone's tag is stale.
    pinned = repo_cell(
        url,
        moved,
        "p-2-0000beef",
        requested="nightly",
        resolved_at=1700000000.5,
        resolved_by="controller",
    )
    runner = run_cell(home, pinned)
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "p-2-0000beef") / "repo.json")
    assert info["requested"] == "nightly" and info["resolved"] == moved == info["sha"]
    assert info["resolved_at"] == 1700000000.5 and info["resolved_by"] == "controller"
    assert info["fetch"] == "always" and info["fetched"] is True
    dest = home / "src" / "demo"
    assert git(dest, "rev-parse", "HEAD") == moved
    assert git(dest, "rev-parse", "nightly") == moved  # tags fetched with force


def test_fetch_never_uses_the_clone_as_it_is(home: Path, origin: Path) -> None:
    url = origin.as_uri()
    old = git(origin, "rev-parse", "HEAD")
    git(origin, "tag", "nightly")
    assert run_cell(home, repo_cell(url, "main")).done["status"] == "passed"
    commit(origin, "server.txt", "v2\n")
    git(origin, "tag", "-f", "nightly")

    runner = run_cell(home, repo_cell(url, "nightly", "n-2-0000beef", fetch="never"))
    assert runner.done["status"] == "passed", runner.done
    info = load(cell_dir(home, "n-2-0000beef") / "repo.json")
    assert info["sha"] == old and info["fetched"] is False and info["fetch"] == "never"
    assert info["requested"] == "nightly" and "nothing fetched" in info["fetch_note"]
    dest = home / "src" / "demo"
    assert git(dest, "rev-parse", "nightly") == old  # nothing was fetched

    runner = run_cell(home, repo_cell(url, "no-such", "n-3-0000cafe", fetch="never"))
    assert runner.done["status"] == "failed", runner.done
    assert "unknown ref 'no-such' in the clone" in runner.done["reason"]
    assert "repo.fetch is never" in runner.done["reason"]

    # No clone at dest: a clone is a fetch, so never refuses it and says what to do.
    cell = repo_cell(url, "main", "n-4-0000f00d", fetch="never")
    cell["repo"]["dest"] = "src/fresh"  # type: ignore[index]
    runner = run_cell(home, cell)
    assert runner.done["status"] == "failed", runner.done
    assert "holds no clone and repo.fetch is never" in runner.done["reason"]
    assert not (home / "src" / "fresh").exists()


def runner_resolve(home: Path, *args: str) -> tuple[int, dict[str, object]]:
    """`python -m orchestrator.runner resolve ARGS` with $HOME at `home`; (rc, its JSON)."""
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.runner", "resolve", *args],
        cwd=home,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_runner_resolve_names_branches_and_peels_annotated_tags(home: Path, origin: Path) -> None:
    head = git(origin, "rev-parse", "HEAD")
    first = git(origin, "rev-list", "--max-parents=0", "HEAD")
    git(origin, "tag", "-a", "-m", "release", "v2", first)
    tag_object = git(origin, "rev-parse", "v2")
    assert tag_object != first
    shutil.copytree(origin, home / "-o-origin")  # relative to $HOME, and not an option
    rc, doc = runner_resolve(home, "--", "-o-origin", "main", "v2", "HEAD", "nope")
    assert rc == 0 and doc["ok"] is True, doc
    assert doc["refs"] == {
        "main": {"sha": head, "ref": "refs/heads/main"},
        "v2": {"sha": first, "ref": "refs/tags/v2"},
        "HEAD": {"sha": head, "ref": "HEAD"},
        "nope": None,
    }
    rc, doc = runner_resolve(home, str(home / "missing"), "main")
    assert rc == 1 and doc["ok"] is False
    assert "does not appear to be a git repository" in str(doc["reason"])
