"""Flag mappings to argv: booleans, drops, lists, dicts, key spellings."""

from __future__ import annotations

import json

import pytest

from orchestrator.adapters.flags import flags_to_argv, normalize_args
from orchestrator.errors import InputError


def test_scalars_booleans_and_drops() -> None:
    args = normalize_args(
        {
            "model-path": "/models/m",
            "tp_size": 8,
            "--mem-fraction-static": 0.85,
            "disable-custom-all-reduce": True,
            "disable-cuda-graph": False,
            "chunked-prefill-size": None,
        }
    )
    assert flags_to_argv(args) == [
        "--model-path",
        "/models/m",
        "--tp-size",
        "8",
        "--mem-fraction-static",
        "0.85",
        "--disable-custom-all-reduce",
    ]


def test_list_styles() -> None:
    args = {"cuda-graph-bs": [1, 2, 4], "middleware": ["a.M", "b.N"], "ids": ["x", "y"], "j": [1]}
    argv = flags_to_argv(args, list_styles={"middleware": "repeat", "ids": "csv", "j": "json"})
    assert argv == [
        "--cuda-graph-bs", "1", "2", "4",
        "--middleware", "a.M", "--middleware", "b.N",
        "--ids", "x,y",
        "--j", "[1]",
    ]  # fmt: skip


def test_dict_becomes_one_json_argument() -> None:
    override = {"architectures": ["DeepseekV3ForCausalLM"], "rope_scaling": {"factor": 4.0}}
    argv = flags_to_argv({"json-model-override-args": override})
    assert argv[0] == "--json-model-override-args"
    assert json.loads(argv[1]) == override
    assert len(argv) == 2


def test_same_flag_twice_is_an_error() -> None:
    with pytest.raises(InputError) as info:
        normalize_args({"tp-size": 8, "tp_size": 4})
    assert info.value.key_path == "args.tp_size"


@pytest.mark.parametrize("value", [[], [[1, 2]], [None]])
def test_bad_list_values(value: list[object]) -> None:
    with pytest.raises(InputError) as info:
        flags_to_argv({"x": value})
    assert (info.value.key_path or "").startswith("args.x")
