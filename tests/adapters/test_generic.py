"""The generic adapters: command argv, readiness, JSON/JSONL result files and stdout regexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.cell import BenchSpec
from orchestrator.errors import InputError

from .cells import make_cell


def test_registry_unknown_name_suggests_closest() -> None:
    with pytest.raises(InputError) as info:
        server_adapter("generc")
    assert info.value.key_path == "adapter"
    assert "generic" in (info.value.hint or "")
    with pytest.raises(InputError):
        bench_adapter("nope-at-all")


def test_server_command_string_is_split_and_args_recorded() -> None:
    spec = server_adapter("generic").build(
        {
            "command": "python3 -m http.server 8123 --bind '127.0.0.1'",
            "args": {"note": "recorded only"},
            "port": 8123,
            "ready": {"path": "/"},
        }
    )
    assert spec.argv == ("python3", "-m", "http.server", "8123", "--bind", "127.0.0.1")
    assert spec.args == {"note": "recorded only"}
    assert spec.ready.url == "http://127.0.0.1:8123/"
    assert spec.ready.log is None
    assert spec.port == 8123


def test_server_wildcard_host_is_probed_on_loopback() -> None:
    spec = server_adapter("generic").build(
        {"command": ["srv", 1, 2.5], "host": "0.0.0.0", "port": "9000", "ready": {"path": "health"}}
    )
    assert spec.argv == ("srv", "1", "2.5")
    assert spec.ready.url == "http://127.0.0.1:9000/health"


def test_server_ready_log_and_url_kept_as_given() -> None:
    spec = server_adapter("generic").build(
        {
            "command": ["srv"],
            "ready": {"url": "http://10.0.0.5:1/x", "log": r"listening on \d+", "timeout": 30},
            "stop_grace": 3,
            "verify_env": "warn",
        }
    )
    assert spec.ready.url == "http://10.0.0.5:1/x"
    assert spec.ready.log == r"listening on \d+"
    assert spec.ready.timeout == 30.0
    assert spec.stop_grace == 3.0
    assert spec.verify_env == "warn"


@pytest.mark.parametrize(
    ("section", "key_path"),
    [
        ({}, "command"),
        ({"command": ""}, "command"),
        ({"command": "a 'unterminated"}, "command"),
        ({"command": ["a", {"b": 1}]}, "command[1]"),
        ({"command": ["a"], "ready": {"path": "/h"}}, "ready.path"),
        ({"command": ["a"], "ready": {"log": "("}}, "ready.log"),
        ({"command": ["a"], "ready": {"tiemout": 3}}, "ready.tiemout"),
        ({"command": ["a"], "port": "eighty"}, "port"),
        ({"command": ["a"], "verify_env": "loud"}, "verify_env"),
    ],
)
def test_server_bad_input(section: dict[str, object], key_path: str) -> None:
    with pytest.raises(InputError) as info:
        server_adapter("generic").build(section)
    assert info.value.key_path == key_path


def test_bench_build() -> None:
    spec = bench_adapter("generic").build(
        {
            "command": "bench --n 3",
            "result_file": "out.json",
            "metrics": {"tps": r"throughput: ([\d.]+)"},
            "warmup": 1,
            "repeats": 3,
            "timeout": 60,
        },
        None,
    )
    assert spec.argv == ("bench", "--n", "3")
    assert (spec.result_file, spec.warmup, spec.repeats, spec.timeout) == ("out.json", 1, 3, 60.0)
    assert spec.metrics == {"tps": r"throughput: ([\d.]+)"}


def test_bench_bad_regex() -> None:
    with pytest.raises(InputError) as info:
        bench_adapter("generic").build({"command": "x", "metrics": {"tps": "(["}}, None)
    assert info.value.key_path == "metrics.tps"


def test_parse_json_object_and_regex(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text(
        '{"tokens_per_s": 93.5, "ok": true, "name": "x", "n": 4, "rate": Infinity}'
    )
    (tmp_path / "stdout").write_text(
        "warming up\nthroughput: 91.25 tok/s\nthroughput: 99 tok/s\nlatency=12ms\n"
    )
    cell = make_cell(
        bench=BenchSpec(
            argv=("x",),
            result_file="out.json",
            metrics={"tps": r"throughput: ([\d.]+)", "lat": r"latency=\d+", "gone": r"nope (\d)"},
        )
    )
    result = bench_adapter("generic").parse_repeat_with_sources(tmp_path, cell)
    # booleans, strings and infinities are not metrics; the first regex match wins
    assert result.metrics == {"tokens_per_s": 93.5, "n": 4.0, "tps": 91.25}
    assert result.sources["tps"] == "stdout"
    assert result.sources["n"] == "out.json"
    assert any("gone" in note for note in result.notes)
    assert any("lat" in note for note in result.notes)  # "latency=12ms" has no number group


def test_parse_jsonl_last_line(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_text('{"x": 1}\n{"x": 2, "y": 3.5}\n\n')
    cell = make_cell(bench=BenchSpec(argv=("x",), result_file="r.jsonl"))
    assert bench_adapter("generic").parse_repeat(tmp_path, cell) == {"x": 2.0, "y": 3.5}


def test_parse_missing_result_file_is_a_note(tmp_path: Path) -> None:
    cell = make_cell(bench=BenchSpec(argv=("x",), result_file="r.json"))
    result = bench_adapter("generic").parse_repeat_with_sources(tmp_path, cell)
    assert result.metrics == {}
    assert result.notes


def test_regex_metrics_read_a_log_that_is_not_utf8(tmp_path: Path) -> None:
    # bytes that are not UTF-8, an astral character, then the figures: ASCII patterns search
    # the bytes, a pattern with other characters the decoded text; both as before
    (tmp_path / "stdout").write_bytes(
        b"\xff\xfe\x80 noise \xf0\x9f\x9a\x80\nthroughput: 91.25 tok/s\nd\xc3\xa9bit: 7\n"
    )
    cell = make_cell(
        bench=BenchSpec(
            argv=("x",),
            metrics={"tps": r"throughput: ([\d.]+)", "debit": r"débit: (\d+)", "n": r"n=(\d)"},
        )
    )
    result = bench_adapter("generic").parse_repeat_with_sources(tmp_path, cell)
    assert result.metrics == {"tps": 91.25, "debit": 7.0}
    assert [n for n in result.notes if "n=" in n] == [
        "metric n: regex 'n=(\\\\d)' did not match stdout"
    ]


def test_regex_metrics_without_stdout_is_a_note(tmp_path: Path) -> None:
    cell = make_cell(bench=BenchSpec(argv=("x",), metrics={"tps": r"t: (\d+)"}))
    result = bench_adapter("generic").parse_repeat_with_sources(tmp_path, cell)
    assert result.metrics == {}
    assert result.notes == ["stdout is missing: regex metrics not read"]
