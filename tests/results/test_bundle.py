"""Bundle writing and reading: atomic cells, redaction, packing, opening by id or prefix."""

from __future__ import annotations

import gc
import io
import json
import re
import shutil
import tarfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from results_helpers import PLANTED, files_containing, make_cell_archive, make_cell_dir

from orchestrator.errors import BundleError
from orchestrator.results import bundle as bundle_mod
from orchestrator.results import read as read_mod
from orchestrator.results.archive import extract_archive, pack
from orchestrator.results.bundle import BundleWriter, new_run_id
from orchestrator.results.manifest import MANIFEST_NAME, verify_manifest
from orchestrator.results.read import RunBundle, open_cell, open_run
from orchestrator.results.runs import list_runs

CELLS = ["spec-off-11111111", "spec-eagle3-2-22222222", "spec-eagle3-4-33333333"]


def _write_run(
    results: Path,
    run_id: str,
    *,
    statuses: tuple[str, ...] = ("passed", "failed", "passed"),
    started: str = "2026-11-30T14:25:01+0000",
    tmp_path: Path,
) -> BundleWriter:
    """A whole run as the controller writes it: start files, cells, metrics, manifest."""
    writer = BundleWriter(results, run_id)
    pdir = tmp_path / f"pb-{run_id}" / "playbooks"
    pdir.mkdir(parents=True)
    (pdir / "demo.yml").write_text("name: demo\nextends: ../base.yml\n")
    (pdir.parent / "base.yml").write_text("vars: {}\n")
    writer.copy_playbook_files([pdir / "demo.yml", pdir.parent / "base.yml"], pdir)
    writer.write_json("plan.json", {"cells": [{"id": c} for c in reversed(CELLS)]})
    writer.write_json("inventory.json", {"hosts": {"gpu01": {"vars": {}}}})
    writer.write_json("hosts/gpu01/facts.json", {"hostname": "gpu01"})
    cells = {}
    src = tmp_path / f"src-{run_id}"
    for i, (cid, status) in enumerate(zip(CELLS, statuses, strict=False)):
        cell_dir = make_cell_dir(src, cid, status=status, axes={"spec": cid.split("-")[1]})
        if i % 2 == 0:
            archive = make_cell_archive(cell_dir, src / f"{cid}.tar.gz")
            writer.add_cell_archive(cid, archive, [PLANTED])
        else:
            writer.add_cell_dir(cid, cell_dir, [PLANTED])
        writer.write_cell_file(cid, "metrics.json", {"summary": {"tput": {"median": 90.0 + i}}})
        cells[cid] = {"host": "gpu01", "status": status, "reason": None}
    writer.write_json(
        "run.json",
        {
            "run_id": run_id,
            "playbook": "demo",
            "started": started,
            "status": "failed",
            "cells": cells,
        },
    )
    writer.finalize()
    return writer


@pytest.fixture
def run(tmp_path: Path) -> BundleWriter:
    return _write_run(tmp_path / "results", "20261130-142501-demo-3f9c", tmp_path=tmp_path)


def test_a_written_run_reads_back_whole(run: BundleWriter) -> None:
    assert verify_manifest(run.path).ok
    bundle = open_run(run.path)
    assert bundle.run_id == "20261130-142501-demo-3f9c" and bundle.finalized
    assert list(bundle.cells) == list(reversed(CELLS))  # plan order
    assert bundle.plan is not None and bundle.plan["schema_version"] == 1
    assert bundle.inventory is not None and "gpu01" in bundle.inventory["hosts"]
    assert bundle.hosts == {"gpu01": {"schema_version": 1, "hostname": "gpu01"}}
    rel = sorted(p.relative_to(run.path / "playbook").as_posix() for p in bundle.playbook_files)
    assert rel == ["base.yml", "playbooks/demo.yml"]

    cell = bundle.cells["spec-eagle3-2-22222222"]
    assert cell.id == "spec-eagle3-2-22222222"
    assert cell.status == "failed" and cell.failed_step == "ready"
    assert cell.reason is not None and "rc 1" in cell.reason
    assert cell.axes == {"spec": "eagle3"} and cell.host == "gpu01"
    assert cell.steps["repo"]["status"] == "ok"
    assert cell.repo is not None and cell.repo["sha"] == "a" * 40
    assert cell.env_check is not None and cell.env_check["ok"] is True
    assert cell.server is not None and cell.server["pid"] == 123
    assert cell.snapshot_pre == {"schema_version": 1, "hostname": "gpu01"}
    assert cell.snapshot_post is not None
    assert cell.metrics == {"schema_version": 1, "summary": {"tput": {"median": 91.0}}}
    assert [e["event"] for e in cell.events] == ["step", "done"]
    assert set(cell.captures["server_info"]) == {"ready", "after-1"}
    assert cell.capture("server_info", "after-1") == {"tp_size": 8, "n": 1}
    assert cell.capture("server_info", "after-9") is None
    assert [r.n for r in cell.repeats] == [1, 2, 10]
    assert [r.n for r in cell.warmups] == [1]
    assert cell.repeats[0].exit is not None and cell.repeats[0].exit["rc"] == 0
    assert cell.repeats[2].stdout.read_text().startswith("output_throughput")
    assert set(cell.logs) == {"server.log", "setup.log", "events.jsonl"}


def test_the_planted_token_is_in_no_file_of_the_bundle(run: BundleWriter, tmp_path: Path) -> None:
    assert files_containing(tmp_path / f"src-{run.run_id}", PLANTED)  # it was there
    assert files_containing(run.path, PLANTED) == []
    server_log = (run.path / "cells" / CELLS[0] / "server.log").read_text()
    assert "HF_TOKEN=***REDACTED***" in server_log


def test_every_json_the_writer_writes_has_a_schema_version(run: BundleWriter) -> None:
    for rel in ("run.json", "plan.json", "inventory.json", "hosts/gpu01/facts.json"):
        assert json.loads((run.path / rel).read_text())["schema_version"] == 1
    run.write_json("extra.json", {"schema_version": 7, "x": 1})
    assert json.loads((run.path / "extra.json").read_text())["schema_version"] == 7
    assert not [p for p in run.path.rglob("*") if p.name.endswith(".tmp")]


def test_any_write_after_finalize_removes_the_stale_manifest(run: BundleWriter) -> None:
    assert (run.path / MANIFEST_NAME).is_file()
    run.write_json("run.json", {"run_id": run.run_id, "status": "passed"})
    assert not (run.path / MANIFEST_NAME).exists()
    run.finalize()
    assert verify_manifest(run.path).ok


def test_new_refuses_an_existing_run_and_resume_reopens_it(run: BundleWriter) -> None:
    results = run.path.parent
    with pytest.raises(BundleError, match="already exists"):
        BundleWriter(results, run.run_id)
    with pytest.raises(BundleError, match="no such run"):
        BundleWriter(results, "nope", new=False)
    again = BundleWriter(results, run.run_id, new=False)
    assert not (run.path / MANIFEST_NAME).exists()
    assert again.complete_cells() == set(CELLS)
    assert again.read_json("run.json")["run_id"] == run.run_id
    assert again.read_json("absent.json") is None and not again.exists("absent.json")


def test_empty_run_id_gets_a_fresh_one(tmp_path: Path) -> None:
    writer = BundleWriter(tmp_path, "", playbook="eagle3 regression")
    assert re.fullmatch(r"\d{8}-\d{6}-eagle3-regression-[0-9a-f]{4}", writer.run_id)
    assert writer.path.is_dir()


def test_new_run_id_format() -> None:
    rid = new_run_id("eagle3-regression", datetime(2026, 11, 30, 14, 25, 1))
    assert re.fullmatch(r"20261130-142501-eagle3-regression-[0-9a-f]{4}", rid)
    assert new_run_id("../../x y", datetime(2026, 1, 2, 3, 4, 5)).startswith("20260102-030405-x-y-")


def test_a_finished_cell_is_never_overwritten_but_an_interrupted_one_is(
    run: BundleWriter, tmp_path: Path
) -> None:
    src = tmp_path / "again"
    with pytest.raises(BundleError, match="already recorded"):
        run.add_cell_dir(CELLS[0], make_cell_dir(src, CELLS[0]))
    partial = make_cell_dir(src, "spec-x-44444444", status="interrupted")
    run.add_cell_dir("spec-x-44444444", partial)
    assert "spec-x-44444444" not in run.complete_cells()  # redone on --resume
    redo = make_cell_dir(tmp_path / "redo", "spec-x-44444444", status="passed")
    run.add_cell_dir("spec-x-44444444", redo)
    assert "spec-x-44444444" in run.complete_cells()
    assert not list((run.path / "cells").glob(".*"))


def test_a_cell_interrupted_mid_write_is_never_read(
    run: BundleWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(root: Path, values: Any) -> None:
        raise KeyboardInterrupt  # the controller dies while redacting the copy

    monkeypatch.setattr(bundle_mod, "redact_tree", boom)
    cell = make_cell_dir(tmp_path / "src4", "spec-y-55555555")
    with pytest.raises(KeyboardInterrupt):
        run.add_cell_dir("spec-y-55555555", cell)
    assert (run.path / "cells" / ".spec-y-55555555.tmp" / "cell.json").is_file()
    assert not (run.path / "cells" / "spec-y-55555555").exists()

    bundle = open_run(run.path)
    assert "spec-y-55555555" not in bundle.cells and ".spec-y-55555555.tmp" not in bundle.cells
    with pytest.raises(BundleError, match="incomplete cell"):
        open_cell(run.path / "cells" / ".spec-y-55555555.tmp")
    with pytest.raises(BundleError, match="no cell"):
        open_cell(f"{run.path}/spec-y")
    run.finalize()
    assert verify_manifest(run.path).ok  # the manifest leaves it out too

    monkeypatch.undo()
    run.add_cell_dir("spec-y-55555555", cell)  # a retry replaces the leftover staging
    assert not (run.path / "cells" / ".spec-y-55555555.tmp").exists()
    assert "spec-y-55555555" in open_run(run.path).cells


def _evil_archive(path: Path, add: Any) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("cell/cell.json")
        data = b'{"status": "passed"}'
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        add(tar)
    return path


def _member(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, io.BytesIO(data)


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("add", "message"),
    [
        (lambda t: t.addfile(*_member("/etc/evil")), "unsafe path"),
        (lambda t: t.addfile(*_member("cell/../../evil")), "unsafe path"),
        (lambda t: t.addfile(_symlink("cell/pw", "/etc/passwd")), "link out"),
        (lambda t: t.addfile(_symlink("cell/up", "../../x")), "link out"),
    ],
)
def test_unsafe_archives_are_refused(
    run: BundleWriter, tmp_path: Path, add: Any, message: str
) -> None:
    archive = _evil_archive(tmp_path / "evil.tar.gz", add)
    with pytest.raises(BundleError, match=message):
        run.add_cell_archive("evil-66666666", archive)
    assert not (run.path / "cells" / "evil-66666666").exists()
    assert not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()


def test_extract_archive_flattens_the_single_top_directory(tmp_path: Path) -> None:
    cell = make_cell_dir(tmp_path / "src", "c1")
    archive = make_cell_archive(cell, tmp_path / "c1.tar.gz")
    staged = extract_archive(archive, tmp_path / "staged")
    assert (staged / "cell.json").is_file()
    with pytest.raises(BundleError, match="already exists"):
        extract_archive(archive, staged)
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(BundleError, match="cannot extract") as info:
        extract_archive(tmp_path / "junk.tar.gz", tmp_path / "junk")
    assert len(info.value.render().splitlines()) == 1  # not one line per method tarfile tried


def test_pack_and_open_the_archive_gives_the_same_cells(run: BundleWriter, tmp_path: Path) -> None:
    (run.path / "cells" / ".leftover.tmp").mkdir()
    archive = pack(run.path)
    assert archive == run.path.with_name(f"{run.run_id}.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[0] == run.run_id and all(n.startswith(run.run_id) for n in names)
    assert not any(".leftover.tmp" in n for n in names)
    assert pack(run.path, tmp_path / "again.tar.gz").read_bytes() == archive.read_bytes()

    direct = open_run(run.path)
    with open_run(archive) as packed:
        assert packed.packed and packed.source == archive
        assert list(packed.cells) == list(direct.cells)
        assert packed.verify().ok
        for cid, cell in packed.cells.items():
            assert cell.cell_json == direct.cells[cid].cell_json
            assert cell.metrics == direct.cells[cid].metrics
        extracted = packed.path
        assert extracted.is_dir()
    assert not extracted.exists()  # removed on leaving the block

    kept = open_run(archive).path  # a caller holding only the path: kept until exit
    gc.collect()
    assert (kept / "run.json").is_file()


def test_pack_refuses_a_non_run_and_writing_inside_the_run(
    run: BundleWriter, tmp_path: Path
) -> None:
    with pytest.raises(BundleError, match=r"no run\.json"):
        pack(tmp_path)
    with pytest.raises(BundleError, match="inside the run"):
        pack(run.path, run.path / "x.tar.gz")
    with pytest.raises(BundleError, match=r"x\.zip: a packed run is a \.tar\.gz") as info:
        pack(run.path, tmp_path / "x.zip")  # no reader would open it
    assert info.value.hint == f"-o {tmp_path / 'x'}.tar.gz, or a folder"
    archive = pack(run.path)
    with pytest.raises(BundleError, match="already a packed run"):
        pack(archive)


def test_pack_into_a_directory_names_the_archive_after_the_run(
    run: BundleWriter, tmp_path: Path
) -> None:
    shared = tmp_path / "to-share"
    shared.mkdir()
    assert pack(run.path, shared) == shared / f"{run.run_id}.tar.gz"
    assert open_run(shared / f"{run.run_id}.tar.gz").verify().ok


def test_a_run_given_where_a_cell_is_wanted_says_so(run: BundleWriter) -> None:
    for ref in (run.path, pack(run.path)):
        with pytest.raises(BundleError) as info:
            open_cell(ref)
        assert info.value.message == f"{ref} is a run, not a cell"
        assert f"{ref}/CELL" in str(info.value.hint)


def test_open_cell_by_directory_id_prefix_and_archive(run: BundleWriter) -> None:
    by_dir = open_cell(run.path / "cells" / CELLS[1])
    assert by_dir.id == CELLS[1] and by_dir.run is not None
    assert open_cell(f"{run.path}/{CELLS[2]}").id == CELLS[2]
    assert open_cell(f"{run.path}/spec-eagle3-4").id == CELLS[2]
    assert open_cell(f"{run.path}/cells/spec-off").id == CELLS[0]
    results = run.path.parent
    assert open_cell(f"{run.run_id}/spec-off", results_dir=results).id == CELLS[0]
    assert open_cell("20261130-142501/spec-off", results_dir=results).id == CELLS[0]
    with pytest.raises(BundleError, match="matches 2 cells"):
        open_cell(f"{run.path}/spec-eagle3")
    with pytest.raises(BundleError, match="no cell 'zzz'"):
        open_cell(f"{run.path}/zzz")
    archive = pack(run.path)
    assert open_cell(f"{archive}/spec-off").metrics is not None
    loose = make_cell_dir(run.path.parent / "loose", "lonely")
    assert open_cell(loose).run is None and open_cell(loose).status == "passed"


def test_missing_or_corrupt_files_are_bundle_errors_with_the_path(
    run: BundleWriter, tmp_path: Path
) -> None:
    with pytest.raises(BundleError, match="no such run"):
        open_run(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BundleError, match=r"no run\.json") as exc:
        open_run(empty)
    assert str(empty) in str(exc.value)
    (run.path / "cells" / CELLS[0] / "metrics.json").write_text("{broken")
    cell = open_run(run.path).cells[CELLS[0]]
    with pytest.raises(BundleError, match=r"metrics\.json: not valid JSON"):
        _ = cell.metrics
    (run.path / "run.json").write_text("[1, 2")
    with pytest.raises(BundleError, match=r"run\.json: not valid JSON"):
        RunBundle(run.path)


def test_list_runs_summarizes_directories_and_packed_runs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _write_run(
        results,
        "20261130-150000-demo-bbbb",
        statuses=("passed", "passed", "passed"),
        started="2026-11-30T15:00:00+0000",
        tmp_path=tmp_path,
    )
    older = _write_run(results, "20261130-142501-demo-aaaa", tmp_path=tmp_path)
    packed_only = _write_run(
        results,
        "20261201-090000-demo-cccc",
        started="2026-12-01T09:00:00+0000",
        tmp_path=tmp_path,
    )
    pack(packed_only.path)
    shutil.rmtree(packed_only.path)
    broken = results / "20261101-000000-broken-dddd"
    broken.mkdir()
    (broken / "run.json").write_text("{")
    (results / "not-a-run").mkdir()

    runs = list_runs(results)
    assert [r.run_id for r in runs] == [
        "20261101-000000-broken-dddd",
        "20261130-142501-demo-aaaa",
        "20261130-150000-demo-bbbb",
        "20261201-090000-demo-cccc",
    ]
    broken_s, first, second, third = runs
    assert broken_s.error is not None and "not valid JSON" in broken_s.error
    assert (first.passed, first.failed, first.cells) == (2, 1, 3)
    assert first.playbook == "demo" and first.hosts == ["gpu01"] and first.finalized
    assert first.path == older.path and not first.packed
    assert (second.passed, second.failed) == (3, 0)
    assert third.packed and third.finalized and third.passed == 2
    assert list_runs(tmp_path / "absent") == []
    stopped = tmp_path / "stopped"
    _write_run(stopped, "20261130-160000-demo-eeee", statuses=("failed", "interrupted", "not-run"),
               tmp_path=tmp_path)  # fmt: skip
    (run,) = list_runs(stopped)
    assert (run.passed, run.failed, run.not_run) == (0, 1, 2)  # a stopped cell is no failure


def test_an_unknown_cell_names_every_cell_or_says_how_many_were_left_out(
    run: BundleWriter, tmp_path: Path
) -> None:
    with pytest.raises(BundleError) as err:
        open_cell(f"{run.path}/zzz")
    for cid in CELLS:  # few cells: all of them, in plan order
        assert cid in err.value.message
    assert "3 cells:" in err.value.message and "more" not in err.value.message
    many = tmp_path / "many"
    ids = [f"c{i:02d}-{i:08d}" for i in range(13)]
    for cid in ids:
        make_cell_dir(many / "cells", cid)
    (many / "run.json").write_text(json.dumps({"run_id": "many", "cells": {}}))
    with pytest.raises(BundleError) as err:
        open_cell(f"{many}/zzz")
    assert "13 cells: c00-00000000," in err.value.message
    assert "c09-00000009, ... and 3 more" in err.value.message
    assert "c10-" not in err.value.message
    assert "lists every cell" in str(err.value.hint)
    with pytest.raises(BundleError) as err:
        open_cell(f"{many}/c")
    assert "matches 13 cells" in err.value.message and "... and 3 more" in err.value.message


def test_listing_names_all_up_to_the_limit() -> None:
    assert read_mod.listing(["a", "b"]) == "a, b"
    assert read_mod.listing([str(i) for i in range(12)], limit=10).endswith("9, ... and 2 more")
    assert read_mod.listing([]) == ""


def test_an_ambiguous_run_prefix_says_how_many_runs_were_left_out(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for i in range(12):
        (results / f"2026-run-{i:02d}").mkdir(parents=True)
        (results / f"2026-run-{i:02d}" / "run.json").write_text("{}")
    with pytest.raises(BundleError) as err:
        read_mod.resolve_run("2026", results)
    assert "matches 12 runs: 2026-run-00," in err.value.message
    assert "2026-run-09, ... and 2 more" in err.value.message


def test_show_on_a_packed_run_prints_paths_inside_the_run_and_how_to_extract(
    run: BundleWriter, tmp_path: Path
) -> None:
    import subprocess

    from orchestrator.results.show import describe_cell, describe_run

    archive = pack(run.path)
    cell = open_cell(f"{archive}/{CELLS[0]}")
    assert cell.run is not None and cell.run.packed
    extraction = str(cell.run.path)
    text = describe_cell(cell)
    assert extraction not in text  # that folder is deleted when the command exits
    assert f"path      cells/{CELLS[0]} in {archive}" in text
    assert f"server.log   cells/{CELLS[0]}/server.log" in text
    member = f"{run.run_id}/cells/{CELLS[0]}"
    (extract,) = [line for line in text.splitlines() if line.startswith("extract with:")]
    assert extract == f"extract with: tar -xzf {archive} {member}"
    # the command works, and the printed paths are where the files land, relative to the run
    out = tmp_path / "x"
    out.mkdir()
    command = extract.removeprefix("extract with: ").split()
    subprocess.run(command, cwd=out, check=True, capture_output=True)
    assert (out / run.run_id / f"cells/{CELLS[0]}/server.log").is_file()
    run_text = describe_run(open_run(archive))
    assert "orch-bundle-" not in run_text
    assert f"cells: {run.run_id}/cells/ inside {archive}" in run_text
    # an unpacked run still prints real paths, and no extract line
    plain = describe_cell(open_cell(f"{run.path}/{CELLS[0]}"))
    assert f"path      {run.path / 'cells' / CELLS[0]}" in plain
    assert "extract with" not in plain
