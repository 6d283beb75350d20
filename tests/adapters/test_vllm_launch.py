"""How the vLLM adapters start what they start: the playbook's interpreter (`python`), the
readiness check that proves the engine generates, and the environment defaults both engines'
adapters set (SPT_NOENV) and record."""

from __future__ import annotations

import pytest

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.adapters.vllm import CLI_MODULE
from orchestrator.errors import InputError

VENV_PY = "/opt/engine/bin/python"


def test_server_python_runs_the_cli_module_under_that_interpreter() -> None:
    spec = server_adapter("vllm").build({"python": VENV_PY, "args": {"model": "/m", "port": 8011}})
    assert spec.argv[:5] == (VENV_PY, "-m", CLI_MODULE, "serve", "/m")
    assert CLI_MODULE == "vllm.entrypoints.cli.main"


def test_bench_python_runs_bench_serve_under_that_interpreter() -> None:
    server = server_adapter("vllm").build({"args": {"model": "/m"}})
    bench = bench_adapter("vllm.bench_serve").build({"python": VENV_PY, "args": {}}, server)
    assert bench.argv[:5] == (VENV_PY, "-m", CLI_MODULE, "bench", "serve")
    assert "--base-url" in bench.argv


def test_without_python_the_console_script_is_used() -> None:
    spec = server_adapter("vllm").build({"args": {"model": "/m"}})
    assert spec.argv[:3] == ("vllm", "serve", "/m")


@pytest.mark.parametrize("adapter", ["vllm", "vllm.bench_serve"])
def test_launcher_and_python_together_are_refused(adapter: str) -> None:
    section = {"launcher": "/x/vllm serve", "python": VENV_PY, "args": {"model": "/m"}}
    with pytest.raises(InputError) as info:
        if adapter == "vllm":
            server_adapter("vllm").build(section)
        else:
            server = server_adapter("vllm").build({"args": {"model": "/m"}})
            bench_adapter(adapter).build({**section, "args": {}}, server)
    assert info.value.key_path == "python"
    assert "launcher and python" in str(info.value)


def test_readiness_ends_with_one_token_completion_by_default() -> None:
    spec = server_adapter("vllm").build(
        {"args": {"model": "/models/tiny", "port": 8012, "served-model-name": ["tiny", "t"]}}
    )
    assert spec.ready.url == "http://127.0.0.1:8012/health"
    assert spec.ready.generate_url == "http://127.0.0.1:8012/v1/completions"
    assert spec.ready.generate_body == {
        "model": "tiny",
        "prompt": "Hello",
        "max_tokens": 1,
        "temperature": 0,
    }


def test_readiness_generate_can_be_turned_off_and_is_vllms_alone() -> None:
    spec = server_adapter("vllm").build({"ready": {"generate": False}, "args": {"model": "/m"}})
    assert spec.ready.generate_url is None
    assert "generate_url" not in spec.ready.model_dump(mode="json")  # ids of others unchanged
    with pytest.raises(InputError) as info:
        server_adapter("vllm").build({"ready": {"generate": "yes"}, "args": {"model": "/m"}})
    assert info.value.key_path == "ready.generate"
    with pytest.raises(InputError) as info:
        server_adapter("sglang").build({"ready": {"generate": True}, "args": {"model-path": "/m"}})
    assert info.value.key_path == "ready.generate"


@pytest.mark.parametrize(
    ("adapter", "args"), [("vllm", {"model": "/m"}), ("sglang", {"model-path": "/m"})]
)
def test_both_engines_keep_their_workers_environ_readable(
    adapter: str, args: dict[str, str]
) -> None:
    spec = server_adapter(adapter).build({"args": args})
    assert spec.env_defaults == {"SPT_NOENV": "1"}
    assert spec.model_dump(mode="json")["env_defaults"] == {"SPT_NOENV": "1"}


def test_generic_servers_carry_no_env_defaults() -> None:
    spec = server_adapter("generic").build({"command": "sleep 5"})
    assert spec.env_defaults == {}
    assert "env_defaults" not in spec.model_dump(mode="json")


@pytest.mark.parametrize("kind", ["server", "bench"])
def test_generic_refuses_python_it_would_ignore(kind: str) -> None:
    section = {"command": "sleep 1", "python": VENV_PY}
    with pytest.raises(InputError) as info:
        if kind == "server":
            server_adapter("generic").build(section)
        else:
            bench_adapter("generic").build(section, None)
    assert info.value.key_path == "python"
