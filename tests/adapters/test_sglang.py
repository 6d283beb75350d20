"""The sglang server adapter: argv, defaults, and analyze() on realistic logs and captures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters import server_adapter
from orchestrator.adapters.sglang import parse_decode_lines
from orchestrator.cell import ServerSpec
from orchestrator.errors import InputError

from .cells import FIXTURES, make_cell

SG = FIXTURES / "sglang"
TUNED = {
    "NCCL_DEBUG": "INFO",
    "NCCL_MIN_NCHANNELS": "32",
    "NCCL_CROSS_NIC": "1",
    "NCCL_ALGO": "Ring",
}


def build(section: dict[str, Any]) -> ServerSpec:
    return server_adapter("sglang").build(section)


def test_argv_and_defaults() -> None:
    spec = build(
        {
            "adapter": "sglang",
            "args": {
                "model-path": "/models/Kimi-K2.5",
                "tp-size": 8,
                "disable_custom_all_reduce": True,
                "disable-cuda-graph": False,
                "speculative-algorithm": None,
            },
        }
    )
    assert spec.argv == (
        "python3", "-m", "sglang.launch_server",
        "--model-path", "/models/Kimi-K2.5", "--tp-size", "8",
        "--disable-custom-all-reduce", "--port", "30000",
    )  # fmt: skip
    assert spec.port == 30000
    assert spec.ready.url == "http://127.0.0.1:30000/health_generate"
    assert spec.ready.status == 200
    assert spec.ready.log == "The server is fired up and ready to roll!"
    assert spec.ready.timeout == 1200.0
    assert [c.name for c in spec.captures] == ["server_info"]
    assert spec.captures[0].urls == (
        "http://127.0.0.1:30000/server_info",
        "http://127.0.0.1:30000/get_server_info",
    )
    assert spec.args["disable-custom-all-reduce"] is True


def test_host_port_launcher_python_and_ready_override() -> None:
    spec = build(
        {
            "python": "/opt/venv/bin/python",
            "args": {"model-path": "m", "host": "0.0.0.0", "port": "31000"},
            "ready": {"timeout": 600, "log": None},
            "captures": [],
        }
    )
    assert spec.argv[:3] == ("/opt/venv/bin/python", "-m", "sglang.launch_server")
    assert spec.argv[5:7] == ("--host", "0.0.0.0")
    assert spec.port == 31000
    assert spec.ready.url == "http://127.0.0.1:31000/health_generate"  # wildcard probed on loopback
    assert spec.ready.log is None
    assert spec.ready.timeout == 600.0
    assert spec.captures == ()

    sim = build({"launcher": "orch sim serve", "port": 30123, "args": {"tp-size": 2}})
    assert sim.argv == ("orch", "sim", "serve", "--tp-size", "2", "--port", "30123")


def test_model_required_and_port_conflict() -> None:
    with pytest.raises(InputError) as info:
        build({"args": {"tp-size": 8}})
    assert info.value.key_path == "args.model-path"
    with pytest.raises(InputError) as info:
        build({"port": 1, "args": {"model-path": "m", "port": 2}})
    assert info.value.key_path == "port"


@pytest.mark.parametrize("port", [0, 65536, 99999, "99999"])
def test_a_port_outside_1_to_65535_is_refused(port: object) -> None:
    with pytest.raises(InputError) as info:
        build({"args": {"model-path": "m", "port": port}})
    assert info.value.key_path == "args.port"
    assert info.value.message == f"expected a port number (1-65535), got {int(str(port))}"


def test_decode_lines_both_forms() -> None:
    new = parse_decode_lines((SG / "server.eagle3-tuned.log").read_text())
    old = parse_decode_lines((SG / "server.2025-baseline.log").read_text())
    assert len(new) == 10 and {r["form"] for r in new} == {"comma"}
    assert new[0] == {
        "form": "comma",
        "running_req": 1,
        "token": 1197,
        "token_usage": 0.0,
        "accept_len": 2.44,
        "accept_rate": 0.72,
        "cuda_graph": True,
        "gen_throughput": 94.1,
        "queue_req": 0,
    }
    assert len(old) == 4 and {r["form"] for r in old} == {"dot"}
    assert old[0]["gen_throughput"] == 88.91 and "accept_len" not in old[0]


def cell_dir_with(tmp_path: Path, log: str, captures: list[str] = ()) -> Path:  # type: ignore[assignment]
    shutil.copy(SG / log, tmp_path / "server.log")
    (tmp_path / "captures").mkdir()
    for name in captures:
        shutil.copy(SG / name, tmp_path / "captures" / name)
    return tmp_path


def test_analyze_tuned_eagle3(tmp_path: Path) -> None:
    server = build({"args": {"model-path": "/models/Kimi-K2.5", "tp-size": 8, "port": 30000}})
    cell_dir = cell_dir_with(
        tmp_path,
        "server.eagle3-tuned.log",
        ["server_info.ready.json", "server_info.after-warmup-1.json", "server_info.after-1.json"],
    )
    out = server_adapter("sglang").analyze(cell_dir, make_cell(server=server, env=TUNED))
    m, facts = out["metrics"], out["facts"]
    assert m["log_gen_throughput"] == pytest.approx(93.765)
    assert m["log_accept_len"] == pytest.approx(2.41)
    assert m["server_info_accept_length"] == 2.41
    assert facts["nccl"]["version"] == "2.27.5+cuda12.9"
    assert facts["nccl"]["nccl_version"] == "2.27.5"
    assert facts["nccl"]["cuda_version"] == "12.9"
    assert facts["nccl"]["env"] == {
        "NCCL_ALGO": "Ring",
        "NCCL_CROSS_NIC": "1",
        "NCCL_MIN_NCHANNELS": "32",
    }
    assert facts["nccl"]["processes"] == 8
    assert facts["decode"]["lines"] == 10 and facts["decode"]["cuda_graph"] is True
    assert facts["server_info"]["ready"]["avg_spec_accept_length"] == []
    checks = {c["name"]: c for c in out["checks"]}
    assert all(c["ok"] for c in checks.values()), checks
    assert set(checks) == {
        "nccl_env:NCCL_ALGO",
        "nccl_env:NCCL_CROSS_NIC",
        "nccl_env:NCCL_MIN_NCHANNELS",
        "server_args",
    }
    assert "8 process" in checks["nccl_env:NCCL_ALGO"]["detail"]


def test_analyze_flags_declared_but_reported_otherwise(tmp_path: Path) -> None:
    server = build(
        {
            "args": {
                "model-path": "/models/Kimi-K2.5",
                "tp-size": 8,
                "speculative-num-draft-tokens": 4,
            }
        }
    )
    cell_dir = cell_dir_with(tmp_path, "server.eagle3-tuned.log", ["server_info.ready.json"])
    out = server_adapter("sglang").analyze(cell_dir, make_cell(server=server))
    failed = [c for c in out["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["server_arg:speculative-num-draft-tokens"]
    assert "speculative_num_draft_tokens=3" in failed[0]["detail"]


def test_analyze_declared_nccl_var_never_reported(tmp_path: Path) -> None:
    env = {**TUNED, "NCCL_PROTO": "Simple", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
    cell_dir = cell_dir_with(tmp_path, "server.eagle3-tuned.log")
    out = server_adapter("sglang").analyze(cell_dir, make_cell(env=env))
    failed = [c for c in out["checks"] if not c["ok"]]
    assert failed == [
        {
            "name": "nccl_env:NCCL_PROTO",
            "ok": False,
            "detail": "NCCL never reported NCCL_PROTO (declared Simple)",
        }
    ]


def test_analyze_old_log_reported_value_differs(tmp_path: Path) -> None:
    env = {"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}
    cell_dir = cell_dir_with(tmp_path, "server.2025-baseline.log")
    out = server_adapter("sglang").analyze(cell_dir, make_cell(env=env))
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["nccl_env:NCCL_IB_HCA"]["ok"] is True
    assert checks["nccl_env:NCCL_ALGO"]["ok"] is False
    assert "NCCL reported NCCL_ALGO=Tree (declared Ring)" in checks["nccl_env:NCCL_ALGO"]["detail"]
    assert out["facts"]["nccl"]["version"] == "2.21.5+cuda12.4"
    assert out["metrics"] == {"log_gen_throughput": pytest.approx(88.965)}
    assert out["facts"]["decode"]["forms"] == ["dot"]


def test_analyze_without_nccl_debug_skips_env_checks(tmp_path: Path) -> None:
    cell_dir = cell_dir_with(tmp_path, "server.eagle3-tuned.log")
    env = {"NCCL_ALGO": "Tree"}
    out = server_adapter("sglang").analyze(cell_dir, make_cell(env=env))
    assert out["checks"] == []
    assert out["facts"]["nccl"]["env_check"].startswith("skipped: NCCL_DEBUG is unset")


def test_analyze_missing_log_and_captures(tmp_path: Path) -> None:
    out = server_adapter("sglang").analyze(tmp_path, make_cell(env=TUNED))
    assert out["facts"]["server_log"] == "missing"
    assert all(not c["ok"] for c in out["checks"])
    assert "no NCCL INFO lines at all" in out["checks"][0]["detail"]


def test_server_info_capture_shape_is_tolerated(tmp_path: Path) -> None:
    (tmp_path / "captures").mkdir()
    (tmp_path / "captures" / "server_info.after-1.json").write_text(
        json.dumps({"internal_states": {"avg_spec_accept_length": 3.1}})
    )
    (tmp_path / "captures" / "server_info.after-2.json").write_text("not json")
    out = server_adapter("sglang").analyze(tmp_path, make_cell())
    assert out["metrics"]["server_info_accept_length"] == 3.1
