"""`orch diff`: sections in order of likely cause, with real cell directories and git repos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analyze_fixtures import (
    base_cell,
    env_check,
    gpu,
    make_repo,
    repo_json,
    snapshot,
    write_cell,
    write_run,
)

from orchestrator.analyze.diff.cells import diff_cells, diff_paths, diff_runs
from orchestrator.analyze.diff.host import decode_event_reasons, parse_pip_freeze
from orchestrator.analyze.diff.model import SECTION_ORDER, CellDiff, RunDiff
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence, load_run
from orchestrator.errors import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
GOOD = [{"output_throughput": v} for v in (94.1, 93.8, 94.3, 94.0, 93.9)]
BAD = [{"output_throughput": v} for v in (60.2, 60.9, 59.8, 60.4, 60.1)]


def _pair(tmp_path: Path, a_kwargs: dict, b_kwargs: dict) -> tuple[CellEvidence, CellEvidence]:
    a = write_cell(tmp_path / "a", **a_kwargs)
    b = write_cell(tmp_path / "b", **b_kwargs)
    return CellEvidence.load(a), CellEvidence.load(b)


def test_identical_cells_have_no_differences(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, {"repeats": GOOD}, {"repeats": GOOD})
    diff = diff_cells(a, b)
    assert diff.differing == []  # metrics without a significant change are no difference
    assert diff.unchanged == list(SECTION_ORDER)
    text = render_diff(diff)
    everything = "code, packages, environment, server flags, bench, system, hardware, metrics"
    assert f"no differences in: {everything}" in text
    metric = diff.section("metrics").metrics[0]
    assert metric.significant is False and metric.method == "mann-whitney"


def test_metrics_moved_within_noise_are_shown_but_are_no_difference(tmp_path: Path) -> None:
    noisy = [{"output_throughput": v + 0.2} for v in (94.1, 93.8, 94.3, 94.0, 93.9)]
    a, b = _pair(tmp_path, {"repeats": GOOD}, {"repeats": noisy})
    diff = diff_cells(a, b)
    assert diff.differing == [] and "metrics" in diff.unchanged
    text = render_diff(diff)
    assert "[metrics] metrics: no significant change" in text
    assert "hardware, metrics (no significant change)" in text
    assert "[metrics]" not in render_diff(diff_cells(a, a))  # identical medians: nothing to show


def test_one_run_a_side_is_shown_as_cannot_tell(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, {"repeats": GOOD[:1]}, {"repeats": BAD[:1]})
    diff = diff_cells(a, b)
    (metric,) = diff.section("metrics").metrics
    assert metric.significant is None and metric.method == "single"
    assert [s.name for s in diff.differing] == ["metrics"]  # moved: a person should look
    assert "can't tell (one run on a side: n=1/1; add repeats)" in render_diff(diff)
    still = [{"output_throughput": GOOD[0]["output_throughput"] + 0.5}]
    _, same = _pair(tmp_path / "same", {"repeats": GOOD[:1]}, {"repeats": still})
    assert diff_cells(a, same).differing == []  # below the threshold: no difference


def test_a_diff_without_a_metrics_section_renders(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, {"repeats": GOOD}, {"repeats": BAD})
    diff = diff_cells(a, b)
    diff.sections = [s for s in diff.sections if s.name != "metrics"]  # as audit's drift does
    assert "no differences in: code" in render_diff(diff)


def test_a_metric_counts_as_a_difference_when_significant_or_one_sided(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, {"repeats": GOOD}, {"repeats": BAD})
    assert [s.name for s in diff_cells(a, b).differing] == ["metrics"]
    only_a = [{**r, "extra_metric": 1.0} for r in GOOD]
    a, b = _pair(tmp_path / "x", {"repeats": only_a}, {"repeats": GOOD})
    assert [s.name for s in diff_cells(a, b).differing] == ["metrics"]


def test_a_run_against_itself_has_no_differences(tmp_path: Path) -> None:
    cells = [
        {"cell": base_cell(f"spec-{n}-1111111{n}", axes={"spec": str(n)}), "repeats": GOOD}
        for n in range(3)
    ]
    run = load_run(write_run(tmp_path, "run-a", cells))
    text = render_diff(diff_runs(run.cells, run.cells))
    assert "differences, most likely cause first" not in text
    assert "metrics: 3 of 3" not in text
    assert (
        "no differences in any pair: code, packages, environment, server flags, bench, system, "
        "hardware, metrics"
    ) in text


def test_diff_paths_refuses_a_cell_against_a_run(tmp_path: Path) -> None:
    cells = [{"cell": base_cell("spec-off-11111111", axes={"spec": "off"}), "repeats": GOOD}]
    run = write_run(tmp_path, "run-a", cells)
    cell = run / "cells" / "spec-off-11111111"
    for a, b in ((cell, run), (run, cell)):
        with pytest.raises(InputError, match="cannot diff a cell with a run") as err:
            diff_paths(a, b)
        assert "cells/spec-off-11111111" in str(err.value.hint)
    assert isinstance(diff_paths(cell, cell), CellDiff)
    assert isinstance(diff_paths(run, run), RunDiff)


def test_commit_change_is_first_and_lists_every_commit_between(tmp_path: Path) -> None:
    repo = tmp_path / "sglang"
    shas = make_repo(repo, ["base: fast path", "refactor scheduler", "tweak spec decode"])
    cell = base_cell(repo_dest=str(repo))
    a, b = _pair(
        tmp_path,
        {"cell": cell, "repo": repo_json(shas[0]), "repeats": GOOD},
        {"cell": cell, "repo": repo_json(shas[2]), "repeats": BAD},
    )
    diff = diff_cells(a, b)  # the repo is found through the cells' repo dest
    assert [s.name for s in diff.differing] == ["code", "metrics"]
    code = diff.section("code")
    assert {e.key for e in code.entries} == {"sha", "describe"}
    log = code.blocks[0]
    assert log.title.startswith("commits in B, not in A") and log.title.endswith(": 2")
    assert [line.split(" ", 1)[1] for line in log.lines] == [
        "tweak spec decode",
        "refactor scheduler",
    ]
    stat = code.blocks[-1]
    assert any("file1.py" in line for line in stat.lines)
    assert any("2 files changed" in line for line in stat.lines)

    text = render_diff(diff)
    first_section = next(line for line in text.splitlines() if line.startswith("["))
    assert first_section.startswith("[code]")
    assert text.index("[code]") < text.index("[metrics]")
    assert "refactor scheduler" in text and "tweak spec decode" in text
    metric = diff.section("metrics").metrics[0]
    assert metric.significant and metric.method == "mann-whitney"
    assert metric.delta_pct is not None and metric.delta_pct < -30

    # reversed: B is behind A, shown as the commits A has and B lacks
    back = diff_cells(b, a).section("code").blocks
    assert "B is behind A" in back[0].title and len(back[0].lines) == 2
    assert back[1].title.startswith("git diff --stat")


def test_commit_history_from_an_explicit_repo_and_a_local_url(tmp_path: Path) -> None:
    repo = tmp_path / "clone"
    shas = make_repo(repo, ["one", "two"])
    cell = base_cell(repo_url=f"file://{repo}")  # dest does not exist here; the URL does
    a, b = _pair(
        tmp_path,
        {"cell": cell, "repo": repo_json(shas[0])},
        {"cell": cell, "repo": repo_json(shas[1])},
    )
    assert diff_cells(a, b).section("code").blocks[0].lines[0].endswith("two")
    explicit = diff_cells(a, b, repo_path=repo).section("code")
    assert explicit.blocks[0].lines[0].endswith("two")
    missing = diff_cells(a, b, repo_path=tmp_path / "nowhere").section("code")
    assert not missing.blocks and "commit history not shown" in missing.notes[0]


def test_env_var_seen_differently_by_the_server_is_first(tmp_path: Path) -> None:
    declared = {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "32"}
    cell = base_cell(env=declared)
    seen_b = dict(declared, NCCL_MIN_NCHANNELS=None)  # the workers never got it
    sha = "a" * 40
    a, b = _pair(
        tmp_path,
        {"cell": cell, "repo": repo_json(sha), "env": env_check(declared), "repeats": GOOD},
        {"cell": cell, "repo": repo_json(sha), "env": env_check(seen_b), "repeats": BAD},
    )
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing] == ["environment", "metrics"]
    entry = diff.section("environment").entries[0]
    assert entry.key == "NCCL_MIN_NCHANNELS (observed in server processes)"
    assert entry.a == "32 (all 3 processes)" and entry.b == "<unset> (all 3 processes)"
    assert entry.note == "set in A's server, missing in B's processes"
    text = render_diff(diff)
    assert next(line for line in text.splitlines() if line.startswith("[")).startswith(
        "[environment]"
    )
    assert "no differences in: code, packages, server flags, bench, system, hardware" in text


def test_throttled_gpu_shows_in_hardware(tmp_path: Path) -> None:
    healthy = snapshot(gpus=2)
    throttled = snapshot(gpus=2)
    throttled["gpus"]["devices"][1] = gpu(
        1,
        **{
            "clocks.sm": 1410,
            "clocks.max.sm": 1980,
            "pcie.link.gen.gpucurrent": 3,
            "temperature.gpu": 36,  # noise-level: kept out of the text
            "clocks_event_reasons.active": "0x0000000000000048",
        },
    )
    a, b = _pair(
        tmp_path,
        {"snapshot_pre": healthy, "snapshot_post": healthy},
        {"snapshot_pre": throttled, "snapshot_post": snapshot(gpus=2)},
    )
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing] == ["hardware"]
    entries = {e.key: e for e in diff.section("hardware").entries}
    assert entries["GPU 1 clocks.sm"].a == 1980 and entries["GPU 1 clocks.sm"].b == 1410
    assert "B below max (1410 of max 1980)" in (entries["GPU 1 clocks.sm"].note or "")
    assert entries["GPU 1 pcie.link.gen.current"].b == 3
    assert "B below max (3 of max 5)" in (entries["GPU 1 pcie.link.gen.current"].note or "")
    reasons = entries["GPU 1 clocks_event_reasons.active"].note or ""
    assert "HwSlowdown+HwThermalSlowdown" in reasons
    assert entries["GPU 1 temperature.gpu"].within_tolerance
    assert not any(k.startswith("GPU 0") for k in entries)
    text = render_diff(diff)
    assert "GPU 1 clocks.sm: 1980 -> 1410" in text
    assert "temperature" not in text and "1 small changes within noise tolerance" in text
    assert decode_event_reasons("0x0000000000000000") == "none"
    assert not any(k.endswith("after run") for k in entries)  # it recovered by the end


def test_a_gpu_that_throttled_during_the_run_shows_after_run(tmp_path: Path) -> None:
    hot = snapshot(gpus=2)
    hot["gpus"]["devices"][0] = gpu(
        0,
        **{
            "clocks.sm": 1305,
            "clocks.max.sm": 1980,
            "temperature.gpu": 91,
            "clocks_event_reasons.active": "0x0000000000000020",
        },
    )
    a, b = _pair(tmp_path, {}, {"snapshot_post": hot})  # both started healthy
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing] == ["hardware"]
    entries = {e.key: e for e in diff.section("hardware").entries}
    assert set(entries) == {
        "GPU 0 clocks.sm after run",
        "GPU 0 temperature.gpu after run",
        "GPU 0 clocks_event_reasons.active after run",
    }
    assert entries["GPU 0 clocks.sm after run"].note == "B below max (1305 of max 1980)"
    assert not entries["GPU 0 temperature.gpu after run"].within_tolerance  # 36 -> 91
    assert "B: SwThermalSlowdown" in (
        entries["GPU 0 clocks_event_reasons.active after run"].note or ""
    )
    assert "GPU 0 clocks.sm after run: 1980 -> 1305" in render_diff(diff)


def test_topology_changes_show_once_per_pair(tmp_path: Path) -> None:
    from orchestrator.runner.probe.parse import parse_topo

    text = (FIXTURES / "h100-healthy" / "topo.txt").read_text()
    moved = text.replace("GPU0\t X \tNV18", "GPU0\t X \tSYS").replace(
        "GPU1\tNV18\t X ", "GPU1\tSYS\t X "
    )
    assert moved != text
    a_topo, b_topo = parse_topo(text), parse_topo(moved)
    b_topo["affinity"]["GPU1"]["NUMA Affinity"] = "1"
    a, b = _pair(
        tmp_path, {"snapshot_pre": snapshot(topo=a_topo)}, {"snapshot_pre": snapshot(topo=b_topo)}
    )
    entries = {e.key: e for e in diff_cells(a, b).section("hardware").entries}
    assert set(entries) == {"topology GPU0-GPU1", "topology GPU1 NUMA Affinity"}
    assert (entries["topology GPU0-GPU1"].a, entries["topology GPU0-GPU1"].b) == ("NV18", "SYS")
    assert (entries["topology GPU1 NUMA Affinity"].a, entries["topology GPU1 NUMA Affinity"].b) == (
        "0",
        "1",
    )


def test_bench_settings_that_moved_are_their_own_section(tmp_path: Path) -> None:
    """Fewer prompts and shorter outputs move every metric with no server-side cause."""
    cell_a, cell_b = base_cell(), base_cell()
    cell_a["bench"] |= {"args": {"num-prompts": 2, "random-output-len": 128}, "warmup": 1}
    cell_b["bench"] |= {"args": {"num-prompts": 3, "random-output-len": 64}, "warmup": 0}
    a, b = _pair(tmp_path, {"cell": cell_a}, {"cell": cell_b})
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing] == ["bench"]
    entries = {e.key: (e.a, e.b) for e in diff.section("bench").entries}
    assert entries == {
        "--num-prompts": (2, 3),
        "--random-output-len": (128, 64),
        "warmup": (1, 0),
    }
    assert "--num-prompts: 2 -> 3" in render_diff(diff)
    # a command bench without args: its argv is what differs
    cell_c = base_cell()
    cell_c["bench"]["argv"] = ["python3", "bench.py", "--n", "5"]
    plain = CellEvidence.load(write_cell(tmp_path / "plain", cell=base_cell()))
    c = CellEvidence.load(write_cell(tmp_path / "c", cell=cell_c))
    entries = {e.key: (e.a, e.b) for e in diff_cells(plain, c).section("bench").entries}
    assert entries["argv"][1] == "python3 bench.py --n 5"


def test_packages_server_flags_and_system(tmp_path: Path) -> None:
    snap_b = snapshot(
        pip_freeze=["numpy==1.26.4", "sglang==0.4.11", "flashinfer-python==0.2.0"],
        torch={"version": "2.6.0+cu124", "cuda": "12.4", "nccl": "2.21.5"},
    )
    snap_b["driver"] = {"version": "560.35.03"}
    cell_b = base_cell(args={"model-path": "/models/m", "tp-size": 4, "port": 30000})
    a, b = _pair(
        tmp_path,
        {"server_log": "x:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"},
        {
            "cell": cell_b,
            "snapshot_pre": snap_b,
            "server_log": "x:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9\n",
        },
    )
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing] == ["packages", "server_flags", "system"]
    packages = {e.key: (e.a, e.b, e.note) for e in diff.section("packages").entries}
    assert packages == {
        "flashinfer-python": (None, "0.2.0", "added"),
        "sglang": ("0.4.10", "0.4.11", "changed"),
        "torch": ("2.5.1", None, "removed"),
    }
    flags = {e.key: (e.a, e.b) for e in diff.section("server_flags").entries}
    assert flags["--tp-size"] == (8, 4)
    assert "argv" in flags
    system = {e.key: (e.a, e.b) for e in diff.section("system").entries}
    assert system == {
        "driver": ("550.54.15", "560.35.03"),
        "torch": ("2.5.1+cu124", "2.6.0+cu124"),
        "NCCL (server log)": ("2.21.5+cuda12.4", "2.27.5+cuda12.9"),
    }


def test_pip_freeze_forms() -> None:
    text = "A_b.c==1.0\nfoo @ file:///x/foo\n-e git+https://g/x.git@abc#egg=sglang\n# c\nbare\n"
    assert parse_pip_freeze(text) == {
        "a-b-c": "1.0",
        "foo": "@ file:///x/foo",
        "sglang": "-e git+https://g/x.git@abc#egg=sglang",
        "bare": "",
    }
    assert parse_pip_freeze({"Torch": "2.5"}) == {"torch": "2.5"}


def test_missing_files_and_failed_cell(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "cell.json").write_text(
        json.dumps({"cell": base_cell("x-1"), "status": "failed", "reason": "server exited (rc 1)"})
    )
    a = CellEvidence.load(bare)
    assert a.repo == {} and a.metrics == {} and a.problems == []
    b = CellEvidence.load(write_cell(tmp_path / "b", repeats=GOOD))
    diff = diff_cells(a, b)
    text = render_diff(diff)
    assert "A failed at step" not in text  # no failed_step recorded
    assert "A failed: server exited (rc 1)" in text
    metric = diff.section("metrics").metrics[0]
    assert metric.median_a is None and metric.significant is None
    (bare / "repo.json").write_text("{not json")
    assert CellEvidence.load(bare).problems[0].startswith(f"{bare / 'repo.json'}: unreadable")


def test_long_section_spills_whole_to_a_file(tmp_path: Path) -> None:
    repo = tmp_path / "sglang"
    messages = [f"commit number {i}" for i in range(80)]
    shas = make_repo(repo, messages)
    cell = base_cell(repo_dest=str(repo))
    a, b = _pair(
        tmp_path,
        {"cell": cell, "repo": repo_json(shas[0])},
        {"cell": cell, "repo": repo_json(shas[-1])},
    )
    diff = diff_cells(a, b)
    spill = tmp_path / "spill"
    text = render_diff(diff, max_lines_inline=20, spill_dir=spill)
    marker = next(line for line in text.splitlines() if "full section:" in line)
    path = Path(marker.split("full section: ", 1)[1])
    assert path.parent == spill and path.name.endswith(".code.txt")
    whole = path.read_text()
    for message in messages[1:]:  # every commit between, none cut
        assert message + "\n" in whole
    assert len(text.splitlines()) < 40
    # without a spill directory nothing is cut either
    inline = render_diff(diff, max_lines_inline=20)
    assert all(message in inline for message in messages[1:])
    # JSON is complete
    data = json.loads(render_diff(diff, "json"))
    code = next(s for s in data["sections"] if s["name"] == "code")
    assert len(code["blocks"][0]["lines"]) == 79
    assert data["differing"] == ["code"]


def test_diff_runs_pairs_by_id_then_axes(tmp_path: Path) -> None:
    c1 = base_cell("spec-off-11111111", axes={"spec": "off"})
    c2 = base_cell("spec-e3-22222222", axes={"spec": "eagle3-2"})
    c2_renamed = base_cell("spec-e3-99999999", axes={"spec": "eagle3-2"})  # spec hash changed
    c3 = base_cell("only-a-33333333", axes={"spec": "x"})
    c4 = base_cell("only-b-44444444", axes={"spec": "y"})
    run_a = write_run(
        tmp_path,
        "run-a",
        [
            {"cell": c1, "repeats": GOOD},
            {"cell": c2, "repeats": GOOD},
            {"cell": c3, "repeats": GOOD},
        ],
    )
    run_b = write_run(
        tmp_path,
        "run-b",
        [
            {"cell": c1, "repeats": BAD},
            {"cell": c2_renamed, "repeats": BAD},
            {"cell": c4, "repeats": BAD},
        ],
    )
    a, b = load_run(run_a), load_run(run_b)
    diff = diff_runs(a.cells, b.cells)
    assert [(p.a.id, p.b.id, p.paired_by) for p in diff.pairs] == [
        ("spec-off-11111111", "spec-off-11111111", "id"),
        ("spec-e3-22222222", "spec-e3-99999999", "axes"),
    ]
    assert [r.id for r in diff.only_a] == ["only-a-33333333"]
    assert [r.id for r in diff.only_b] == ["only-b-44444444"]
    text = render_diff(diff)
    assert "2 cell pairs (1 by id, 1 by axes+host); only in A: 1; only in B: 1" in text
    assert "metrics: 2 of 2 pairs" in text
    assert "(paired by axis values and host: the cell ids differ)" in text
    assert diff.a_run == "run-a" and diff.b_run == "run-b"
    data = json.loads(render_diff(diff, "json"))
    assert data["pairs"][0]["differing"] == ["metrics"]


@pytest.mark.skipif(not (FIXTURES / "h100-throttled").is_dir(), reason="no nvidia-smi fixtures")
def test_throttled_gpu_from_real_nvidia_smi_output(tmp_path: Path) -> None:
    from orchestrator.runner.probe.parse import parse_gpu_csv

    def snap(name: str) -> dict:
        fields = (FIXTURES / name / "fields.txt").read_text().split()
        devices = parse_gpu_csv((FIXTURES / name / "query-gpu.csv").read_text(), fields)
        snap = snapshot()
        snap["gpus"] = {"count": len(devices), "fields": "current", "devices": devices}
        return snap

    a, b = _pair(
        tmp_path, {"snapshot_pre": snap("h100-healthy")}, {"snapshot_pre": snap("h100-throttled")}
    )
    hardware = diff_cells(a, b).section("hardware")
    entries = {e.key: e for e in hardware.entries if not e.within_tolerance}
    assert entries["GPU 3 clocks.sm"].note == "B below max (1095 of max 1980)"
    assert entries["GPU 3 pcie.link.gen.current"].b == 3
    assert entries["GPU 3 pcie.link.width.current"].note == "B below max (8 of max 16)"
    assert "HwSlowdown+HwThermalSlowdown" in (
        entries["GPU 3 clocks_event_reasons.active"].note or ""
    )
    assert not any(k.startswith("GPU 0 clocks") for k in entries)
