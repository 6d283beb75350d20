"""/proc/PID/environ as the kernel lays it out, and as setproctitle leaves it."""

from __future__ import annotations

from orchestrator.runner.procs import parse_environ


def test_a_normal_block() -> None:
    assert parse_environ(b"A=1\0PATH=/bin\0EMPTY=\0") == {"A": "1", "PATH": "/bin", "EMPTY": ""}
    assert parse_environ(b"") == {}  # started with no environment at all: everything missing


def test_an_all_nul_block_was_rewritten() -> None:
    assert parse_environ(b"\0" * 1900) is None


def test_a_block_zeroed_but_for_its_last_entries_was_rewritten() -> None:
    # vLLM 0.32's VLLM::EngineCore: every inherited variable zeroed, the ones its parent added
    # last (LOCAL_WORLD_SIZE, ...) still there
    raw = b"\0" * 1381 + b"LOCAL_RANK=0\0LOCAL_WORLD_SIZE=1\0"
    assert parse_environ(raw) is None


def test_a_title_spilled_over_the_block_was_rewritten() -> None:
    assert parse_environ(b"ine.EngineCore\0\0\0\0") is None
    assert parse_environ(b"VLLM::Worker_TP0") is None
