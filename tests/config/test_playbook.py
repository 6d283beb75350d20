"""The playbook model, extends, vars_files, extra vars, the schema and secret names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import (
    is_secret_name,
    load_playbook,
    parse_extra_vars,
    playbook_json_schema,
)
from orchestrator.errors import InputError, SourceLocation
from orchestrator.plan.build import build_cells

FULL = """\
name: eagle3-regression
hosts: gpu_nodes
strategy: spread
secrets: [WANDB_API]
vars:
  model: /models/Kimi
  port: 30000
  nccl:
    default: {}
    tuned: {NCCL_MIN_NCHANNELS: 32, NCCL_ALGO: Ring}
matrix:
  commit: [bba2fc4, "3207427"]
  nccl: [default, tuned]
  spec: ["off", {name: eagle3, steps: 2}]
  zip: [[commit, nccl]]
  exclude: [{commit: bba2fc4, spec: "off"}]
  include: [{commit: abc, nccl: tuned, spec: "off"}]
  where: "matrix.nccl != 'default' or matrix.spec == 'off'"
repo:
  url: https://github.com/sgl-project/sglang.git
  dest: /root/sglang
  version: "{{ matrix.commit }}"
  setup: pip install -e python
  dirty: reset
env:
  - {NCCL_DEBUG: INFO}
  - "{{ nccl[matrix.nccl] }}"
server:
  adapter: "{{ 'sglang' }}"
  launcher: [torchrun, --nproc-per-node, 8]
  args:
    - {model-path: "{{ model }}", tp-size: 8, port: "{{ port }}"}
    - "{{ spec }}"
  port: "{{ port }}"
  ready: {path: /health_generate, log: 'fired up', timeout: 1200}
  captures: [{name: server_info, urls: [/server_info, /get_server_info]}]
  stop_grace: 5
  verify_env: warn
bench:
  adapter: sglang.bench_serving
  args: {dataset-name: random, num-prompts: 32}
  warmup: 1
  repeats: "{{ repeats | default(3) }}"
  timeout: 600
expect:
  output_throughput: {min: 85}
  ttft: {ref: 100, tolerance: "5%"}
  itl: {max: 20.5}
snapshot: {pip_freeze: false, topo: true}
timeouts: {cell: 7200, setup: 1800, ready: 1200, bench: 600}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_full_playbook_loads_as_written(tmp_path: Path) -> None:
    loaded = load_playbook(write(tmp_path / "pb.yml", FULL))
    assert loaded.name == "eagle3-regression"
    assert loaded.files == (tmp_path / "pb.yml",)
    # No defaults are filled in: the data is exactly what was written.
    assert "python" not in loaded.data["server"]
    assert loaded.data["bench"]["repeats"] == "{{ repeats | default(3) }}"
    assert loaded.data["matrix"]["spec"][1] == {"name": "eagle3", "steps": 2}
    line = FULL.splitlines().index(
        '    - {model-path: "{{ model }}", tp-size: 8, port: "{{ port }}"}'
    )
    here = SourceLocation(str(tmp_path / "pb.yml"), line + 1, 35)
    assert loaded.locate(("server", "args", 0, "tp-size")) == here
    assert loaded.locate(("server", "args", 0, "unknown")) == SourceLocation(here.file, line + 1, 7)


def test_extends_deep_merges_and_positions_point_into_each_file(tmp_path: Path) -> None:
    write(
        tmp_path / "base" / "common.yml",
        "name: base\nvars:\n  a: 1\n  nested: {x: 1, y: 2}\n"
        "bench:\n  command: [echo, hi]\n  repeats: 3\nenv: [{A: '1'}, {B: '2'}]\n",
    )
    write(tmp_path / "base" / "extra.yml", "vars:\n  b: 2\nbench:\n  warmup: 1\n")
    pb = write(
        tmp_path / "pb.yml",
        "extends: [base/common.yml, base/extra.yml]\nname: child\n"
        "vars:\n  nested: {y: 20, z: 30}\nbench:\n  repeats: 5\nenv: [{C: '3'}]\n",
    )
    loaded = load_playbook(pb)
    assert loaded.data["name"] == "child"
    assert loaded.data["vars"] == {"a": 1, "nested": {"x": 1, "y": 20, "z": 30}, "b": 2}
    assert loaded.data["bench"] == {"command": ["echo", "hi"], "repeats": 5, "warmup": 1}
    assert loaded.data["env"] == [{"C": "3"}]  # lists replace
    assert "extends" not in loaded.data
    assert loaded.files == (pb, tmp_path / "base/common.yml", tmp_path / "base/extra.yml")
    common = str(tmp_path / "base/common.yml")
    assert loaded.positions[("vars", "nested", "x")] == SourceLocation(common, 4, 12)
    assert loaded.positions[("vars", "nested", "y")] == SourceLocation(str(pb), 4, 12)
    assert loaded.positions[("bench", "warmup")].file == str(tmp_path / "base/extra.yml")
    assert loaded.positions[("bench", "command")].file == common
    assert loaded.positions[()] == SourceLocation(str(pb), 1, 1)


def test_extends_cycle_through_three_files_names_the_cycle(tmp_path: Path) -> None:
    write(tmp_path / "a.yml", "extends: b.yml\nname: a\n")
    write(tmp_path / "b.yml", "extends: [c.yml]\n")
    write(tmp_path / "c.yml", "vars: {x: 1}\nextends: a.yml\n")
    with pytest.raises(InputError) as info:
        load_playbook(tmp_path / "a.yml")
    assert info.value.location == SourceLocation(str(tmp_path / "c.yml"), 2, 10)
    assert "cycle: a.yml -> b.yml -> c.yml -> a.yml" in info.value.message


def test_a_diamond_is_not_a_cycle(tmp_path: Path) -> None:
    write(tmp_path / "root.yml", "bench: {command: [echo]}\nvars: {r: 1}\n")
    write(tmp_path / "left.yml", "extends: root.yml\nvars: {l: 1}\n")
    write(tmp_path / "right.yml", "extends: root.yml\nvars: {r: 2}\n")
    pb = write(tmp_path / "pb.yml", "extends: [left.yml, right.yml]\nname: d\n")
    assert load_playbook(pb).data["vars"] == {"r": 2, "l": 1}


def test_extends_missing_file_suggests_a_near_name(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", "vars: {}\n")
    pb = write(tmp_path / "pb.yml", "name: x\nextends: base.yml\nbench: {command: [a]}\n")
    with pytest.raises(InputError) as info:
        load_playbook(pb)
    assert info.value.location == SourceLocation(str(pb), 2, 10)
    assert info.value.hint == "did you mean 'base.yaml'?"
    write(tmp_path / "where_err.yml", "")  # alike in shape only: no suggestion
    other = write(tmp_path / "pb2.yml", "name: x\nextends: nothere.yml\nbench: {command: [a]}\n")
    with pytest.raises(InputError) as info:
        load_playbook(other)
    assert info.value.hint is None


def test_vars_files_replace_vars_and_extra_vars_win(tmp_path: Path) -> None:
    write(tmp_path / "vars" / "site.yml", "model: /site/model\nnccl: {tuned: {}}\n")
    write(tmp_path / "vars" / "empty.yml", "")
    pb = write(
        tmp_path / "pb.yml",
        "name: x\nvars_files: [vars/site.yml, vars/empty.yml]\n"
        "vars:\n  model: /mine\n  nccl: {default: {}}\n  port: 1\nbench: {command: [a]}\n",
    )
    loaded = load_playbook(pb, {"port": "2"})
    assert loaded.data["vars"] == {"model": "/site/model", "nccl": {"tuned": {}}, "port": "2"}
    assert loaded.positions[("vars", "model")] == SourceLocation(
        str(tmp_path / "vars/site.yml"), 1, 1
    )
    assert loaded.positions[("vars", "port")].file == "<extra vars>"
    assert loaded.extra_vars == {"port": "2"}
    assert tmp_path / "vars/site.yml" in loaded.files
    assert "vars_files" not in loaded.data


def test_vars_file_names_are_templates_of_extra_vars_and_own_vars(tmp_path: Path) -> None:
    write(tmp_path / "vars" / "h200.yml", "tp: 8\n")
    write(tmp_path / "vars" / "h100-prod.yml", "tp: 4\n")
    pb = write(
        tmp_path / "pb.yml",
        "name: x\nvars_files: ['vars/{{ cluster }}{{ suffix }}.yml']\n"
        "vars:\n  cluster: h200\n  suffix: \"{{ '-' ~ stage if stage else '' }}\"\n"
        "  stage: ''\nbench: {command: [a]}\n",
    )
    assert load_playbook(pb).data["vars"]["tp"] == 8
    loaded = load_playbook(pb, {"cluster": "h100", "stage": "prod"})
    assert loaded.data["vars"]["tp"] == 4  # -e wins over the file's own vars, as in Ansible
    assert tmp_path / "vars" / "h100-prod.yml" in loaded.files


def test_a_vars_file_name_sees_the_vars_of_the_files_before_it(tmp_path: Path) -> None:
    write(tmp_path / "vars" / "site.yml", "cluster: h100\n")
    write(tmp_path / "vars" / "h100.yml", "tp: 4\n")
    write(tmp_path / "vars" / "h200.yml", "tp: 8\n")
    pb = write(
        tmp_path / "pb.yml",
        "name: x\nvars_files: [vars/site.yml, 'vars/{{ cluster }}.yml']\n"
        "vars: {cluster: h200}\nbench: {command: [a]}\n",
    )
    assert load_playbook(pb).data["vars"]["tp"] == 4  # a vars file beats the file's own vars
    assert load_playbook(pb, {"cluster": "h200"}).data["vars"]["tp"] == 8  # -e beats both


@pytest.mark.parametrize(
    ("name", "needle", "hint"),
    [
        (
            "vars/{{ cluster }}.yml",
            "undefined variable 'cluster'",
            "the inventory and the matrix come later",
        ),
        (
            "vars/{{ matrix.tp }}.yml",
            "undefined variable 'matrix'",
            "the inventory and the matrix come later",
        ),
        ("{{ 3 }}", "must render to a non-empty string, got", None),
        ("vars/{{ h20 }}.yml", "undefined variable 'h20'", "did you mean 'h200'?; vars_files see"),
        ("vars/{{ h200 }}.yml", "vars file not found: vars/h100.yml", None),
    ],
)
def test_a_templated_vars_file_name_that_cannot_be_read_is_located(
    tmp_path: Path, name: str, needle: str, hint: str | None
) -> None:
    pb = write(
        tmp_path / "pb.yml",
        f'name: x\nvars_files:\n  - "{name}"\nvars: {{h200: h100}}\nbench: {{command: [a]}}\n',
    )
    with pytest.raises(InputError) as info:
        load_playbook(pb)
    assert needle in info.value.message
    assert info.value.location == SourceLocation(str(pb), 3, 5)
    assert info.value.key_path == "vars_files[0]"
    if hint:
        assert hint in str(info.value.hint)


def test_base_vars_files_are_relative_to_the_base_and_lose_to_the_child(tmp_path: Path) -> None:
    write(tmp_path / "shared" / "v.yml", "model: /base\nport: 1\n")
    write(tmp_path / "shared" / "base.yml", "vars_files: [v.yml]\nbench: {command: [a]}\n")
    pb = write(tmp_path / "pb.yml", "extends: shared/base.yml\nname: x\nvars: {model: /child}\n")
    assert load_playbook(pb).data["vars"] == {"model": "/child", "port": 1}


def test_extra_vars_that_break_the_model_are_reported(tmp_path: Path) -> None:
    pb = write(tmp_path / "pb.yml", "name: x\nbench: {command: [a]}\n")
    with pytest.raises(InputError, match="'groups' is a name orch sets"):
        load_playbook(pb, {"groups": 1})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("server", "{port: '{{ port }}', command: [a]}"),
        ("server", "{adapter: '{{ matrix.engine }}'}"),
        ("env", "'{{ nccl_env }}'"),
        ("env", "[{A: '1'}, '{{ more }}']"),
        ("server", "{args: '{{ all_args }}', adapter: vllm}"),
        ("server", "{command: 'python3 -m http.server {{ port }}'}"),
        ("expect", "{tput: {min: '{{ floor }}'}}"),
        ("snapshot", "{topo: '{{ want_topo }}'}"),
    ],
)
def test_templates_are_accepted_where_values_may_be_templated(
    tmp_path: Path, field: str, value: str
) -> None:
    pb = write(tmp_path / "pb.yml", f"name: x\nbench: {{command: [a]}}\n{field}: {value}\n")
    assert field in load_playbook(pb).data


@pytest.mark.parametrize(
    ("snippet", "needle", "line", "col"),
    [
        ("server: {command: [a], port: '30000'}", "expected a port number", 3, 30),
        ("server: {command: [a], stop_grace: -1}", "expected a number >= 0", 3, 36),
        ("server: {command: [a], ready: {url: u, path: /p}}", "not both", 3, 40),
        ("server: {command: [a], launcher: []}", "non-empty list", 3, 34),
        ("server: {command: [a], captures: [{name: x}]}", "missing required key 'urls'", 3, 35),
        ("expect: {tput: {tolerance: '5%'}}", "tolerance needs ref", 3, 17),
        ("expect: {tput: {min: 9, max: 1}}", "min 9 is above max 1", 3, 22),
        ("expect: {tput: {}}", "give min, max, or ref", 3, 16),
        ("env: {A: [1, 2]}", "must be a string or number", 3, 10),
        ("matrix: {zip: [commit]}", "expected a list of axis names", 3, 16),
        ("matrix: {where: [1]}", "expected a Jinja2 expression", 3, 17),
        ("secrets: HF_TOKEN", "expected a list of strings", 3, 10),
        ("hosts: [a, b]", "expected a string", 3, 8),
    ],
)
def test_shape_errors_point_at_the_value(
    tmp_path: Path, snippet: str, needle: str, line: int, col: int
) -> None:
    pb = write(tmp_path / "pb.yml", f"name: x\nbench: {{command: [a]}}\n{snippet}\n")
    with pytest.raises(InputError) as info:
        load_playbook(pb)
    assert needle in info.value.render()
    assert info.value.location == SourceLocation(str(pb), line, col)


def test_the_first_error_in_reading_order_is_reported(tmp_path: Path) -> None:
    pb = write(
        tmp_path / "pb.yml",
        "name: x\nbench: {command: [a], repeats: 0}\nserver: {command: [a], port: 0}\n",
    )
    with pytest.raises(InputError) as info:
        load_playbook(pb)
    assert info.value.key_path == "bench.repeats"


class TestExtraVars:
    def test_key_value_pairs_stay_strings(self) -> None:
        assert parse_extra_vars(["a=1 b='two words'", "c=x=y"]) == {
            "a": "1",
            "b": "two words",
            "c": "x=y",
        }

    def test_later_items_win(self) -> None:
        assert parse_extra_vars(["a=1", "a=2"]) == {"a": "2"}

    def test_inline_json_and_yaml(self) -> None:
        assert parse_extra_vars(['{"a": 1, "b": [1, 2]}', "{c: {d: true}}"]) == {
            "a": 1,
            "b": [1, 2],
            "c": {"d": True},
        }

    def test_files(self, tmp_path: Path) -> None:
        write(tmp_path / "v.yml", "a: 1\nb: {c: 2}\n")
        write(tmp_path / "v.json", '{"d": 4}')
        assert parse_extra_vars([f"@{tmp_path}/v.yml", f"@{tmp_path}/v.json"]) == {
            "a": 1,
            "b": {"c": 2},
            "d": 4,
        }

    def test_a_mapping_or_list_after_name_equals_says_to_pass_json(self) -> None:
        with pytest.raises(InputError) as info:
            parse_extra_vars(['nccl={"default": {}}'])
        assert info.value.message == (
            "-e 'nccl={\"default\": {}}': the value of 'nccl' is a mapping, "
            "but name=value gives only strings"
        )
        expected = """pass the whole mapping as JSON: -e '{"nccl": {"default": {}}}'"""
        assert info.value.hint == expected
        assert "is not name=value" not in info.value.render()
        with pytest.raises(InputError, match=r"'tp' is a list") as info:
            parse_extra_vars(["tp=[4, 8]"])
        assert """-e '{"tp": [4, 8]}'""" in str(info.value.hint)
        with pytest.raises(InputError) as info:  # not the first pair: the shape of the fix
            parse_extra_vars(["a=1 nccl={x: 1}"])
        assert """-e '{"nccl": {...}}'""" in str(info.value.hint)
        # a quoted value is the string it says; '=' inside a value is still text
        assert parse_extra_vars(['x="{a: 1}"', "c=x={y}"]) == {"x": "{a: 1}", "c": "x={y}"}

    @pytest.mark.parametrize(
        ("item", "needle"),
        [
            ("", "empty extra vars"),
            ("novalue", "'novalue' is not name=value"),
            ("cluster: dev", "(write -e cluster=dev, or a mapping: -e '{cluster: dev}')"),
            ("1x=2", "'1x' is not a valid variable name"),
            ("a-b=2", "'a-b' is not a valid variable name"),
            ("a='open", "check the quotes"),
            ("[1, 2]", "must be a mapping"),
            ("{a: [1,", "invalid YAML"),
            ("./vars.yml", "write -e @./vars.yml"),
            ("@/nonexistent/v.yml", "extra vars file not found"),
            ("matrix=1", "'matrix' is a name orch sets"),
        ],
    )
    def test_errors_name_the_argument(self, item: str, needle: str) -> None:
        with pytest.raises(InputError) as info:
            parse_extra_vars([item])
        assert needle in info.value.render()
        if item and not item.startswith("@"):
            assert f"-e {item!r}" in info.value.message


def test_json_schema_describes_the_playbook() -> None:
    schema = playbook_json_schema()
    json.dumps(schema)  # serialisable as it is
    assert schema["required"] == ["name", "bench"]
    props = schema["properties"]
    assert {"name", "hosts", "extends", "matrix", "server", "bench", "expect"} <= set(props)
    assert schema["additionalProperties"] is False
    assert "sglang" in json.dumps(schema["$defs"]["ServerSection"])


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("hf_token", True),
        ("HF_API_KEY", True),
        ("API_KEY", True),
        ("KEY", True),
        ("OPENAI_APIKEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("MYSQL_PASSWD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("SSH_KEYS", True),
        ("MAX_TOKENS", False),
        ("TOKENIZER_PATH", False),
        ("KEYBOARD", False),
        ("MONKEY_PATCH", False),
        ("NCCL_ALGO", False),
        ("tp_size", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_declared_secrets_count_too() -> None:
    assert is_secret_name("WANDB_API", declared=["WANDB_API"])
    assert not is_secret_name("WANDB_API")


@pytest.mark.parametrize(
    ("snippet", "key_path", "shown", "line", "col"),
    [
        ("env: {NCCL_CROSS_NIC: yes}", "env.NCCL_CROSS_NIC", "an environment value", 3, 23),
        ("matrix: {spec: [eagle3, off]}", "matrix.spec[1]", "a matrix value", 3, 25),
        ("matrix: {cuda_graph: [on, 'off']}", "matrix.cuda_graph[0]", "a matrix value", 3, 23),
        (
            "matrix: {spec: [a], include: [{spec: no}]}",
            "matrix.include[0].spec",
            "a matrix value",
            3,
            38,
        ),
        (
            "matrix: {spec: [a], exclude: [{spec: 'off', x: yes}]}",
            "matrix.exclude[0].x",
            "a matrix value",
            3,
            48,
        ),
    ],
)
def test_bare_booleans_are_refused_alike_in_env_and_matrix(
    tmp_path: Path, snippet: str, key_path: str, shown: str, line: int, col: int
) -> None:
    """YAML reads a bare on/off/yes/no as a boolean: env and matrix values both say to quote it."""
    pb = write(tmp_path / "pb.yml", f"name: x\nbench: {{command: [a]}}\n{snippet}\n")
    with pytest.raises(InputError) as info:
        load_playbook(pb)
    error = info.value
    assert error.message.startswith(f"{shown} must be text, got ")
    assert error.hint is not None and error.hint.startswith("quote it")
    assert error.key_path == key_path
    assert error.location == SourceLocation(str(pb), line, col)


def test_quoted_on_off_stay_matrix_text_and_true_false_stay_booleans(tmp_path: Path) -> None:
    pb = write(
        tmp_path / "pb.yml",
        "name: x\nmatrix: {spec: ['off', 'on'], graph: [true, false]}\n"
        "bench: {command: [b, '{{ matrix.spec }}', '{{ matrix.graph }}']}\n",
    )
    cells = build_cells(load_playbook(pb), load_inventory(None))
    assert [c.axes for c in cells][:2] == [
        {"spec": "off", "graph": True},
        {"spec": "off", "graph": False},
    ]
    assert cells[0].bench.argv == ("b", "off", "true")
    assert [c.id.split("-")[0] for c in cells] == ["off", "off", "on", "on"]
