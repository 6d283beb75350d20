"""`sim init-repo`: deterministic SHAs, the regression where asked, setup that fails once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sim import model as m
from orchestrator.sim.repo import AUTHORS, init_repo


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def model_at(repo: Path, sha: str) -> dict[str, object]:
    data = json.loads(git(repo, "show", f"{sha}:{m.MODEL_FILE}"))
    assert isinstance(data, dict)
    return data


def test_same_arguments_same_shas(tmp_path: Path) -> None:
    a = init_repo(tmp_path / "a", commits=8, regress_at=5, seed=3)
    b = init_repo(tmp_path / "b", commits=8, regress_at=5, seed=3)
    c = init_repo(tmp_path / "c", commits=8, regress_at=5, seed=4)
    assert a.shas == b.shas
    assert a.shas != c.shas
    assert len(set(a.shas)) == 8
    assert git(a.path, "rev-list", "--count", "HEAD") == "8"


def test_commits_are_signed_by_invented_people_and_say_they_are_simulated(tmp_path: Path) -> None:
    info = init_repo(tmp_path / "r", commits=12, regress_at=7, seed=2)
    people = git(info.path, "log", "--format=%an <%ae>|%cn <%ce>").splitlines()
    assert len(people) == 12
    for line in people:
        for person in line.split("|"):
            assert person.endswith("@example.invalid>"), person
            assert person.split(" <")[0] in {name for name, _ in AUTHORS}
    bodies = git(info.path, "log", "--format=%B%x00").split("\x00")
    assert sum("Simulated commit made by `orch sim init-repo`" in b for b in bodies) == 12


def test_regression_lands_at_k_and_stays(tmp_path: Path) -> None:
    info = init_repo(tmp_path / "r", commits=10, regress_at=6, seed=1)
    verify = [model_at(info.path, sha)["eagle"]["verify_ms"] for sha in info.shas]  # type: ignore[index]
    assert verify == [19.0] * 5 + [29.0] * 5
    assert info.regress == info.shas[5]
    assert git(info.path, "rev-parse", "good") == info.first
    assert git(info.path, "rev-parse", "bad") == info.head
    # Only the regressing commit touches the model file after the first one.
    touched = git(info.path, "log", "--format=%H", "--", m.MODEL_FILE).split()
    assert touched == [info.regress, info.first]
    assert "verify" in git(info.path, "log", "-1", "--format=%B", info.regress).lower()
    assert git(info.path, "status", "--porcelain") == ""


def test_drop_env_bug_and_setup_failure(tmp_path: Path) -> None:
    info = init_repo(
        tmp_path / "r", commits=6, regress_at=4, bugs=["drop-env:NCCL_ALGO@1"], setup_fail_at=2
    )
    bugs = model_at(info.path, info.head)["bugs"]
    assert bugs == {"drop_env": ["NCCL_ALGO"], "drop_env_ranks": [1], "crash_on_start": None}
    assert model_at(info.path, info.head)["eagle"]["verify_ms"] == 19.0  # type: ignore[index]
    results = {}
    for sha in info.shas:
        git(info.path, "checkout", "-q", sha)
        done = subprocess.run(["sh", "setup.sh"], cwd=info.path, capture_output=True, check=False)
        results[sha] = done.returncode
    assert info.setup_fail == info.shas[1]
    assert [results[s] for s in info.shas] == [0, 1, 0, 0, 0, 0]


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        init_repo(tmp_path / "x", commits=5, regress_at=9)
    with pytest.raises(ValueError):
        init_repo(tmp_path / "y", commits=5, bugs=["nonsense"])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(ValueError):
        init_repo(tmp_path / "full", commits=3)


def test_cli_prints_json(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.sim",
            "init-repo",
            str(tmp_path / "r"),
            "--commits",
            "5",
            "--regress-at",
            "3",
            "--seed",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    again = init_repo(tmp_path / "again", commits=5, regress_at=3, seed=2)
    assert data["first"] == again.first
    assert data["regress"] == again.regress
    assert data["head"] == again.head
    assert data["setup"] == "sh setup.sh"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.sim",
            "init-repo",
            str(tmp_path / "z"),
            "--commits",
            "1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "commits" in bad.stderr
