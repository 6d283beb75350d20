"""Result bundles end to end: `orch apply` on localhost against the simulator, then `orch diff`,
`runs`, `show`, `report`, `pack` and `audit` as a user runs them (the CLI as a subprocess).

The runs are shared by the whole module (each takes a few seconds at a small simulator time
scale): two runs that differ only in the repo's commit, one that differs from the first only in
one environment variable, one with a commit axis, and a generic server that echoes its
environment (with planted secrets) into every place it can.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bundle_helpers import (
    ECHO_BENCH,
    ECHO_SERVER,
    apply,
    cell_dirs,
    files_holding,
    files_under,
    git,
    ok,
    orch,
    read_json,
    section_order,
    sim_playbook,
    tar_members_holding,
    write_yaml,
)
from sim_helpers import free_port

from orchestrator.sim.repo import RepoInfo, init_repo

pytestmark = [pytest.mark.slow]

HF_TOKEN = "hf_e2eplantedTOKENq8Zr4Lw2Xv9"  # matches the TOKEN name pattern
ACCESS = "e2e-marked-secret-7Tq3Wm"  # a name the playbook marks secret (`secrets:`)
NEEDLES = [HF_TOKEN.encode(), ACCESS.encode()]


@dataclass
class World:
    """Everything the module's runs share."""

    tmp: Path
    home: Path
    results: Path
    repo: RepoInfo
    good: Path  # run at `good`
    bad: Path  # the same playbook at `bad`
    env_changed: Path  # as `good`, NCCL_ALGO=Tree instead of Ring
    matrix: Path  # one run, commit axis [good, bad], 3 repeats


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("bundles")
    home, results = tmp / "home", tmp / "results"
    home.mkdir()
    repo = init_repo(tmp / "sim-repo", commits=7, regress_at=4)
    port = free_port()
    env = [{"NCCL_ALGO": "{{ nccl_algo }}", "HF_TOKEN": "{{ hf_token }}"}]
    single = sim_playbook(
        tmp / "single.yml",
        name="e2e-commit",
        port=port,
        repo=repo.path,
        env=env,
        extra_vars={"nccl_algo": "Ring", "hf_token": "unset"},
    )
    token = f"hf_token={HF_TOKEN}"
    good = apply(single, results, "-e", token, home=home)
    bad = apply(single, results, "-e", token, "-e", "commit=bad", home=home, code=None)
    env_changed = apply(single, results, "-e", token, "-e", "nccl_algo=Tree", home=home)
    axis = sim_playbook(
        tmp / "axis.yml",
        name="e2e-axis",
        port=port,
        repo=repo.path,
        env=env,
        matrix={"commit": ["good", "bad"]},
        version="{{ matrix.commit }}",
        repeats=3,
        extra_vars={"nccl_algo": "Ring", "hf_token": "unset"},
        dest=".orch/e2e-axis",
    )
    matrix = apply(axis, results, "-e", token, home=home, code=None)
    yield World(tmp, home, results, repo, good, bad, env_changed, matrix)


# -- 1. code first ---------------------------------------------------------------------------


def _check_code_first(world: World, text: str) -> None:
    order = section_order(text)
    assert order and order[0] == "code", text
    expected = git(world.repo.path, "log", "--oneline", "--no-decorate", "good..bad").splitlines()
    assert len(expected) == len(world.repo.shas) - 1
    lines = [line.strip() for line in text.splitlines()]
    for commit in expected:  # every commit between, whole (nothing cut)
        assert commit in lines, f"{commit!r} missing from:\n{text}"
    assert f"commits in B, not in A (git log --oneline {world.repo.first[:12]}.." in text
    assert "git diff --stat" in text
    assert any(line.startswith("orch_sim_model.json") and "|" in line for line in lines), text
    assert "files changed" in text
    assert world.repo.first in text and world.repo.head in text


def test_diff_runs_differing_in_commit_puts_code_first(world: World) -> None:
    out = ok(orch("diff", str(world.good), str(world.bad), home=world.home))
    _check_code_first(world, out)
    assert "1 cell pairs (0 by id, 1 by axes+host)" in out
    # the regression shows in the metrics section, after every cause section
    assert section_order(out)[-1] == "metrics"

    data = json.loads(ok(orch("diff", str(world.good), str(world.bad), "--json", home=world.home)))
    (pair,) = data["pairs"]
    assert pair["differing"][0] == "code"
    assert pair["sections"][0]["name"] == "code"
    code = pair["sections"][0]
    keys = {e["key"]: (e["a"], e["b"]) for e in code["entries"]}
    assert keys["sha"] == (world.repo.first, world.repo.head)
    assert keys["requested"] == ("good", "bad")
    log_block = code["blocks"][0]
    assert len(log_block["lines"]) == len(world.repo.shas) - 1
    assert "environment" not in pair["differing"], pair["differing"]


def test_diff_cells_differing_in_commit_from_one_run(world: World) -> None:
    bad, good = cell_dirs(world.matrix)
    assert good.name.startswith("good-") and bad.name.startswith("bad-"), (good, bad)
    # a directory pair and a RUN/CELL-PREFIX pair say the same
    out = ok(orch("diff", str(good), str(bad), home=world.home))
    _check_code_first(world, out)
    ref_a = f"{world.matrix}/{good.name[:6]}"
    ref_b = f"{world.matrix}/{bad.name[:5]}"
    data = json.loads(ok(orch("diff", ref_a, ref_b, "--json", home=world.home)))
    assert data["a"]["id"] == good.name and data["b"]["id"] == bad.name
    assert data["differing"][0] == "code" and data["sections"][0]["name"] == "code"
    assert data["paired_by"] == "given"


# -- 2. environment first ----------------------------------------------------------------------


def test_diff_runs_differing_in_one_env_var_puts_environment_first(world: World) -> None:
    out = ok(orch("diff", str(world.good), str(world.env_changed), home=world.home))
    order = section_order(out)
    assert order[0] == "environment", out
    assert "code" not in order, out
    assert "NCCL_ALGO (observed in server processes): Ring (all 3 processes) -> Tree" in out, out
    data = json.loads(
        ok(orch("diff", str(world.good), str(world.env_changed), "--json", home=world.home))
    )
    (pair,) = data["pairs"]
    assert pair["differing"][0] == "environment", pair["differing"]
    env = next(s for s in pair["sections"] if s["name"] == "environment")
    keys = [e["key"] for e in env["entries"]]
    assert "NCCL_ALGO (observed in server processes)" in keys
    assert not any(k.startswith(("HF_TOKEN", "ORCH_SIM")) for k in keys), keys


# -- 3. secrets --------------------------------------------------------------------------------


def test_planted_token_is_in_no_file_of_sim_runs(world: World) -> None:
    """The token came in through `-e` (so it is in the recorded argv) and the server env."""
    for run in (world.good, world.bad, world.env_changed, world.matrix):
        assert files_holding(run, NEEDLES) == [], run
        argv = read_json(run / "run.json")["argv"]
        assert any("hf_token=" in a for a in argv), argv  # recorded, value redacted
    observed = read_json(cell_dirs(world.good)[0] / "env_check.json")
    seen = [p["vars"]["HF_TOKEN"]["observed"] for p in observed["processes"]]
    assert seen and all(v == "***REDACTED***" for v in seen), seen


@pytest.fixture(scope="module")
def echo_run(world: World) -> Path:
    """A generic server and bench that print their whole environment and echo the secrets."""
    tmp = world.tmp / "echo"
    tmp.mkdir()
    (tmp / "server.py").write_text(ECHO_SERVER)
    (tmp / "bench.py").write_text(ECHO_BENCH)
    port = free_port()
    url = "http://127.0.0.1:{{ port }}"
    playbook = write_yaml(
        tmp / "echo.yml",
        {
            "name": "e2e-echo",
            "vars": {"port": port, "access": ACCESS},
            "secrets": ["MODEL_ACCESS"],
            "matrix": {"size": [1]},
            "env": {"HF_TOKEN": HF_TOKEN, "MODEL_ACCESS": "{{ access }}", "PLAIN": "visible"},
            "server": {
                "command": f"{{{{ orch_python }}}} {tmp / 'server.py'} {{{{ port }}}}",
                "host": "127.0.0.1",
                "port": "{{ port }}",
                "ready": {"path": "/health", "timeout": 20, "interval": 0.05},
                "captures": [{"name": "info", "urls": [url + "/info"]}],
                "stop_grace": 3,
            },
            "bench": {
                "command": "{{ orch_python }} " + f"{tmp / 'bench.py'} " + url,
                "repeats": 2,
                "timeout": 30,
                "result_file": "result.json",
            },
            "snapshot": {"pip_freeze": False, "topo": False},
        },
    )
    return apply(playbook, world.results, home=world.home)


def test_planted_secrets_are_in_no_file_of_the_bundle(world: World, echo_run: Path) -> None:
    (cell,) = cell_dirs(echo_run)
    log = (cell / "server.log").read_text()
    # the server did print its environment, and the redaction kept the names and other values
    assert "env HF_TOKEN=***REDACTED***" in log, log
    assert "env MODEL_ACCESS=***REDACTED***" in log, log
    assert "env PLAIN=visible" in log
    assert (cell / "captures").is_dir() and list((cell / "captures").iterdir())
    checked = list(files_under(echo_run))
    assert len(checked) > 15, checked
    assert files_holding(echo_run, NEEDLES) == []


def test_no_secret_in_pack_show_report_or_runs(world: World, echo_run: Path) -> None:
    archive = Path(
        ok(
            orch("pack", str(echo_run), "-o", str(world.tmp / "echo.tar.gz"), home=world.home)
        ).strip()
    )
    assert archive.is_file()
    count, found = tar_members_holding(archive, NEEDLES)
    assert count > 15 and found == []
    (cell,) = cell_dirs(echo_run)
    outputs = [
        orch("show", str(echo_run), home=world.home),
        orch("show", str(cell), home=world.home),
        orch("show", str(archive), home=world.home),
        orch("runs", str(world.results), home=world.home),
        *(
            orch("report", str(echo_run), "--format", f, home=world.home)
            for f in ("table", "md", "csv", "json")
        ),
        orch("report", str(archive), "--format", "json", home=world.home),
        orch("diff", str(echo_run), str(echo_run), "--json", home=world.home),
    ]
    for result in outputs:
        text = ok(result) + result.stderr
        for needle in NEEDLES:
            assert needle.decode() not in text, (result.args, text)


# -- 5. interrupted writes and tampering -----------------------------------------------------


def _copy_run(world: World, run: Path, where: str) -> Path:
    target = world.tmp / where / run.name
    shutil.copytree(run, target, symlinks=True)
    return target


def test_interrupted_cell_dir_is_never_read_as_complete(world: World) -> None:
    run = _copy_run(world, world.matrix, "interrupted")
    bad, good = cell_dirs(run)
    staged = run / "cells" / f".{bad.name}.tmp"
    bad.rename(staged)  # as if the controller died between writing and renaming the cell
    ghost = run / "cells" / ".ghost-0000beef.tmp"  # a complete-looking copy, never renamed
    shutil.copytree(good, ghost)
    hidden = [bad.name, "ghost-0000beef"]

    report = json.loads(ok(orch("report", str(run), "--format", "json", home=world.home)))
    assert {row["cell_id"] for row in report} == {good.name}
    for fmt in ("table", "md", "csv"):
        text = ok(orch("report", str(run), "--format", fmt, home=world.home))
        assert not any(h in text for h in hidden), text
    shown = ok(orch("show", str(run), home=world.home))
    assert "ghost" not in shown
    (bad_line,) = [line for line in shown.splitlines() if line.startswith(bad.name)]
    assert "(no cell directory)" in bad_line, shown
    listing = ok(orch("runs", str(run.parent), home=world.home))
    # `runs` summarizes run.json (which the controller writes after a cell is installed)
    assert run.name in listing and "ghost" not in listing, listing
    # the interrupted cell by prefix, by its tmp name, or as a diff side: refused, not read
    for ref in (f"{run}/{bad.name[:5]}", f"{run}/ghost"):
        refused = orch("show", ref, home=world.home)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused
    for args in (("show", str(staged)), ("report", str(staged)), ("report", str(ghost)),
                 ("diff", str(ghost), str(good))):  # fmt: skip
        refused = orch(*args, home=world.home)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert "Traceback" not in refused.stderr and "incomplete" in refused.stderr, refused
    diffed = json.loads(ok(orch("diff", str(world.matrix), str(run), "--json", home=world.home)))
    assert [p["a"]["id"] for p in diffed["pairs"]] == [good.name]
    assert [c["id"] for c in diffed["only_a"]] == [bad.name] and diffed["only_b"] == []
    # a pack leaves the unfinished entries out
    archive = Path(ok(orch("pack", str(run), home=world.home)).strip())
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(good.name in n for n in names), names
    assert not any(".tmp" in n or "ghost" in n or bad.name in n for n in names), names


def test_audit_reports_a_tampered_file_and_passes_an_untouched_bundle(world: World) -> None:
    untouched = _copy_run(world, world.matrix, "untouched")
    out = ok(orch("audit", str(untouched), "--no-drift", home=world.home))
    assert "integrity: ok" in out and "audit: PASSED" in out, out

    tampered = _copy_run(world, world.matrix, "tampered")
    cell = cell_dirs(tampered)[1]
    stdout = cell / "bench" / "1" / "stdout"
    stdout.write_bytes(stdout.read_bytes() + b"\n")
    metrics = read_json(cell / "metrics.json")
    metrics["summary"]["output_throughput"]["median"] = 1e6  # a "better" result
    (cell / "metrics.json").write_text(json.dumps(metrics))
    (cell / "server.log").unlink()
    (tampered / "cells" / "extra.txt").write_text("added later\n")
    result = orch("audit", str(tampered), "--no-drift", home=world.home)
    out = ok(result, 1)
    rel = f"cells/{cell.name}"
    assert "integrity: FAILED" in out and "audit: FAILED" in out, out
    assert f"changed: {rel}/bench/1/stdout" in out
    assert f"changed: {rel}/metrics.json" in out
    assert f"missing: {rel}/server.log" in out
    assert "extra: cells/extra.txt" in out


# -- 6. runs, show, report, pack ---------------------------------------------------------------


def test_runs_show_report_and_a_packed_run(world: World) -> None:
    run = world.matrix
    bad, good = cell_dirs(run)
    listing = ok(orch("runs", str(world.results), home=world.home))
    (row,) = [line for line in listing.splitlines() if line.startswith(run.name)]
    assert "e2e-axis" in row and "localhost" in row and "2/2" in row, listing
    assert all(r.name in listing for r in (world.good, world.bad, world.env_changed))

    shown = ok(orch("show", str(run), home=world.home))
    assert f"run       {run.name}" in shown and "playbook  e2e-axis" in shown
    assert good.name in shown and bad.name in shown
    cell_text = ok(orch("show", f"{run}/{good.name[:6]}", home=world.home))
    assert f"cell      {good.name}" in cell_text and '{"commit": "good"}' in cell_text
    assert f"-> {world.repo.first}" in cell_text
    assert "output_throughput" in cell_text and str(good / "server.log") in cell_text
    # by run id under --results, too
    by_id = ok(orch("show", f"{run.name}/{bad.name}", "--results", str(world.results)))
    assert f"cell      {bad.name}" in by_id

    md = ok(orch("report", str(run), "--by", "commit", "--format", "md", home=world.home))
    header = md.splitlines()[0]
    assert header.startswith("|") and "[commit=good]" in header and "[commit=bad]" in header
    assert "output_throughput" in header

    metrics = sorted(read_json(good / "metrics.json")["summary"])
    tidy = list(csv.DictReader(io.StringIO(ok(orch(
        "report", str(run), "--by", "commit", "--format", "csv", home=world.home)))))  # fmt: skip
    assert len(tidy) == 2 * 3 * len(metrics)  # cells x repeats x metrics
    assert {r["cell_id"] for r in tidy} == {good.name, bad.name}
    assert {r["repeat"] for r in tidy} == {"1", "2", "3"}
    assert {r["commit"] for r in tidy} == {"good", "bad"}
    assert sorted({r["metric"] for r in tidy}) == metrics
    rows = json.loads(ok(orch("report", str(run), "--format", "json", home=world.home)))
    assert len(rows) == len(tidy)
    first = next(r for r in rows if r["cell_id"] == good.name and r["repeat"] == 1)
    assert first["run_id"] == run.name and first["commit"] == "good"
    recorded = read_json(good / "metrics.json")["repeats"][0][first["metric"]]
    assert first["value"] == pytest.approx(recorded)

    archive = Path(ok(orch("pack", str(run), home=world.home)).strip())
    assert archive.name == f"{run.name}.tar.gz" and archive.is_file()
    assert json.loads(ok(orch("report", str(archive), "--format", "json"))) == rows
    assert ok(orch("report", str(archive), "--by", "commit", "--format", "md")) == md
    packed = ok(orch("show", str(archive)))
    assert f"run       {run.name}" in packed and good.name in packed
    packed_cell = ok(orch("show", f"{archive}/{good.name[:6]}"))
    assert f"cell      {good.name}" in packed_cell and "output_throughput" in packed_cell
    audit = ok(orch("audit", str(archive), "--no-drift"))
    assert "integrity: ok" in audit, audit
