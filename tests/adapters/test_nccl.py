"""NCCL log lines and the declared-vs-reported environment check."""

from __future__ import annotations

import pytest

from orchestrator.adapters.nccl import analyze_nccl, env_check_skip_reason, parse_nccl

LOG = """\
[2026-01-14 09:12:09 TP0] Init torch distributed begin.
gpu-node-01:7001:7001 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
gpu-node-01:7001:7001 [0] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 32.
gpu-node-01:7001:7001 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL
gpu-node-01:7001:7001 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0
gpu-node-01:7002:7002 [1] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 16.
gpu-node-01:7002:7002 [1] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL
gpu-node-01:7002:7002 [1] NCCL INFO NCCL_IB_HCA set to mlx5_0
"""


def test_parse_prefixed_lines() -> None:
    log = parse_nccl(LOG)
    assert log.versions == ["2.27.5+cuda12.9"]
    assert log.env["NCCL_MIN_NCHANNELS"] == {"7001": "32", "7002": "16"}
    assert log.env["NCCL_IB_HCA"] == {"7001": "mlx5_0", "7002": "mlx5_0"}
    assert log.processes == {"7001", "7002"}
    facts = log.facts()
    assert facts["env"]["NCCL_MIN_NCHANNELS"] == ["16", "32"]  # processes disagree
    assert facts["env"]["NCCL_P2P_LEVEL"] == "NVL"
    assert facts["env_by_process"]["7002"]["NCCL_MIN_NCHANNELS"] == "16"


def test_parse_bare_lines() -> None:
    log = parse_nccl("NCCL version 2.21.5+cuda12.4\nNCCL_ALGO set by environment to Tree\n")
    assert log.versions == ["2.21.5+cuda12.4"]
    assert log.env == {"NCCL_ALGO": {"": "Tree"}}


def test_declared_values_checked_per_process() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV",
        "NCCL_MIN_NCHANNELS": "32",
        "NCCL_P2P_LEVEL": "NVL",
        "NCCL_ALGO": "Ring",
        "NCCL_SOCKET_IFNAME": "***REDACTED***",
    }
    facts, checks = analyze_nccl(LOG, env)
    by_name = {c["name"]: c for c in checks}
    assert by_name["nccl_env:NCCL_P2P_LEVEL"]["ok"] is True
    assert by_name["nccl_env:NCCL_MIN_NCHANNELS"] == {
        "name": "nccl_env:NCCL_MIN_NCHANNELS",
        "ok": False,
        "detail": "NCCL reported NCCL_MIN_NCHANNELS=16 (declared 32) in pid 7002",
    }
    assert (
        by_name["nccl_env:NCCL_ALGO"]["detail"] == "NCCL never reported NCCL_ALGO (declared Ring)"
    )
    assert by_name["nccl_env:NCCL_SOCKET_IFNAME"]["detail"] == (
        "NCCL never reported NCCL_SOCKET_IFNAME (declared <redacted>)"
    )
    assert "nccl_env:NCCL_DEBUG_SUBSYS" not in by_name and "nccl_env:NCCL_DEBUG" not in by_name
    assert facts["env_check"] == "done"
    assert facts["nccl_version"] == "2.27.5" and facts["cuda_version"] == "12.9"


@pytest.mark.parametrize(
    ("env", "skipped"),
    [
        ({"NCCL_DEBUG": "INFO"}, False),
        ({"NCCL_DEBUG": "info"}, False),
        ({"NCCL_DEBUG": "WARN"}, True),
        ({}, True),
        ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL"}, True),
        ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ALL"}, False),
        ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "^COLL"}, False),
        ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "^ENV,COLL"}, True),
        ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p"}, True),
    ],
)
def test_when_nccl_reports_its_settings(env: dict[str, str], skipped: bool) -> None:
    assert (env_check_skip_reason(env) is not None) is skipped
    _, checks = analyze_nccl(LOG, {**env, "NCCL_ALGO": "Ring"})
    assert (checks == []) is skipped
