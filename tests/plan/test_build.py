"""build_cells: precedence, env/args merging, adapters, expectations, ids, order, strategy."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cell import Cell, cell_id, cell_id_text
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells, cell_spec
from orchestrator.plan.planner import _new_cell

INVENTORY = """
gpu:
  hosts:
    gpu1: {tp: 4, model: /host/model}
    gpu2: {tp: 8}
cpu:
  hosts:
    cpu1:
"""


def plan(
    tmp_path: Path,
    playbook: str,
    inventory: str | None = INVENTORY,
    extra: dict[str, Any] | None = None,
    limit: str | None = None,
) -> list[Cell]:
    (tmp_path / "playbook.yml").write_text(textwrap.dedent(playbook))
    inv = None
    if inventory is not None:
        inv = tmp_path / "inventory.yml"
        inv.write_text(textwrap.dedent(inventory))
    loaded = load_playbook(tmp_path / "playbook.yml", extra or {})
    return build_cells(loaded, load_inventory(inv), limit=limit)


BASE = """
name: demo
hosts: gpu
vars:
  model: /play/model
  port: 30000
  nccl:
    default: {}
    tuned: {NCCL_MIN_NCHANNELS: 32, NCCL_ALGO: Ring}
matrix:
  nccl: [default, tuned]
repo:
  url: https://example.com/sglang.git
  dest: /srv/sglang
  version: main
env:
  - {NCCL_DEBUG: INFO, FLAG: "{{ true }}", N: 3}
  - "{{ nccl[matrix.nccl] }}"
server:
  command: "python -m srv --model {{ model }} --tp {{ tp }} --port {{ port }}"
  port: "{{ port }}"
  args:
    - {model-path: "{{ model }}", tp-size: "{{ tp }}"}
    - {tp-size: 2}
bench:
  command: [python, -m, bench, --port, "{{ port }}"]
  repeats: 3
expect:
  output_throughput: {ref: 90, tolerance: "5%"}
  ttft: {max: 200}
"""


def test_precedence_host_vars_lt_playbook_vars_lt_extra_vars(tmp_path: Path) -> None:
    """Ansible's order: inventory vars < play vars < -e."""
    cells = plan(tmp_path, BASE)
    by_host = {c.host: c for c in cells if c.axes["nccl"] == "default"}
    assert set(by_host) == {"gpu1", "gpu2"}
    assert by_host["gpu1"].server is not None and by_host["gpu2"].server is not None
    assert by_host["gpu1"].server.argv[4] == "/play/model"  # the playbook var beats the host's
    assert by_host["gpu2"].server.argv[4] == "/play/model"
    assert by_host["gpu1"].server.argv[6] == "4"  # a host var the playbook does not set
    # a per-host value the playbook defaults, the Ansible way
    per_host = BASE.replace(
        "model: /play/model", "model: \"{{ host_model | default('/play/model') }}\""
    )
    cells = plan(
        tmp_path,
        per_host,
        inventory=INVENTORY.replace("model: /host/model", "host_model: /host/model"),
    )
    by_host = {c.host: c for c in cells if c.axes["nccl"] == "default"}
    assert by_host["gpu1"].server is not None and by_host["gpu2"].server is not None
    assert by_host["gpu1"].server.argv[4] == "/host/model"
    assert by_host["gpu2"].server.argv[4] == "/play/model"
    cells = plan(tmp_path, BASE, extra={"model": "/cli/model"})
    assert {c.server.argv[4] for c in cells if c.server} == {"/cli/model"}  # -e beats all


def test_env_merged_in_order_and_stringified(tmp_path: Path) -> None:
    cells = plan(tmp_path, BASE, limit="gpu1")
    envs = {c.axes["nccl"]: c.env for c in cells}
    assert envs["default"] == {"NCCL_DEBUG": "INFO", "FLAG": "true", "N": "3"}
    assert envs["tuned"] == {
        "NCCL_DEBUG": "INFO",
        "FLAG": "true",
        "N": "3",
        "NCCL_MIN_NCHANNELS": "32",
        "NCCL_ALGO": "Ring",
    }


def test_args_merged_in_order_native_types_and_expectations(tmp_path: Path) -> None:
    cell = plan(tmp_path, BASE, limit="gpu2")[0]
    assert cell.server is not None
    assert cell.server.args == {"model-path": "/play/model", "tp-size": 2}
    assert cell.server.port == 30000
    assert cell.bench.argv == ("python", "-m", "bench", "--port", "30000")
    assert cell.expect["output_throughput"].ref == 90
    assert cell.expect["output_throughput"].tolerance == pytest.approx(0.05)
    assert cell.expect["ttft"].max == 200
    assert cell.repo is not None and cell.repo.version == "main"


@pytest.mark.parametrize("evil", ["$(touch /tmp/pwned)", "; rm -rf ~", "`id` && x"])
def test_shell_metacharacters_from_axes_stay_one_inert_word(tmp_path: Path, evil: str) -> None:
    play = f"""
    name: inert
    matrix:
      name: [{json.dumps(evil)}]
    repo: {{url: /r, dest: /d, version: main, setup: "pip install {{{{ matrix.name }}}}"}}
    server: {{command: "srv --name {{{{ matrix.name }}}}"}}
    bench: {{command: "bench {{{{ matrix.name }}}} end"}}
    """
    (cell,) = plan(tmp_path, play, inventory=None)
    assert cell.server is not None and cell.repo is not None and cell.repo.setup is not None
    assert cell.server.argv == ("srv", "--name", evil)
    assert cell.bench.argv == ("bench", evil, "end")
    assert shlex.split(cell.repo.setup) == ["pip", "install", evil]


def test_cell_ids_match_cell_py_and_change_with_the_spec(tmp_path: Path) -> None:
    cells = plan(tmp_path, BASE)
    for c in cells:
        assert c.id == cell_id(c.axes, c.host, cell_spec(c))
    assert len({c.id for c in cells}) == len(cells)
    changed = plan(tmp_path, BASE.replace("repeats: 3", "repeats: 4"))
    assert {c.id for c in cells}.isdisjoint({c.id for c in changed})
    assert [c.id.rsplit("-", 1)[0] for c in cells] == [c.id.rsplit("-", 1)[0] for c in changed]


def test_cell_ids_are_stable_across_processes(tmp_path: Path) -> None:
    ids = [c.id for c in plan(tmp_path, BASE)]
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from orchestrator.config.inventory.load import load_inventory\n"
        "from orchestrator.config.playbook import load_playbook\n"
        "from orchestrator.plan.build import build_cells\n"
        "d = Path(sys.argv[1])\n"
        "pb = load_playbook(d / 'playbook.yml', {})\n"
        "cells = build_cells(pb, load_inventory(d / 'inventory.yml'))\n"
        "print(json.dumps([c.id for c in cells]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout) == ids


def test_cells_are_valid_models_and_round_trip(tmp_path: Path) -> None:
    for cell in plan(tmp_path, BASE):
        again = Cell.model_validate(json.loads(cell.model_dump_json()))
        assert again == cell
        assert cell.model_fields_set == Cell.model_construct(**dict(cell)).model_fields_set
    fields = dict(plan(tmp_path, BASE)[0])
    assert _new_cell(dict(fields)) == Cell.model_construct(**fields)


def test_cells_grouped_by_repo_version_per_host(tmp_path: Path) -> None:
    play = """
    name: order
    hosts: gpu1
    matrix:
      x: [1, 2, 3]
      commit: [aaa, bbb]
    repo: {url: /r, dest: /d, version: "{{ matrix.commit }}"}
    bench: {command: "b {{ matrix.x }}"}
    """
    cells = plan(tmp_path, play)
    assert [c.repo.version for c in cells if c.repo] == ["aaa"] * 3 + ["bbb"] * 3
    assert [c.axes["x"] for c in cells] == [1, 2, 3, 1, 2, 3]


def test_spread_runs_each_point_once_round_robin(tmp_path: Path) -> None:
    play = """
    name: spread
    hosts: gpu
    strategy: spread
    matrix: {x: [1, 2, 3]}
    bench: {command: "b {{ matrix.x }} {{ inventory_hostname }}"}
    """
    cells = plan(tmp_path, play)
    assert [(c.host, c.axes["x"]) for c in cells] == [("gpu1", 1), ("gpu1", 3), ("gpu2", 2)]
    assert cells[0].bench.argv == ("b", "1", "gpu1")


def test_builtin_names_are_in_scope(tmp_path: Path) -> None:
    play = """
    name: names
    hosts: gpu1
    bench:
      command: ["{{ orch_python }}", "{{ inventory_hostname }}", "{{ group_names | join(',') }}",
                "{{ groups['gpu'] | join(',') }}", "{{ hostvars['gpu2'].tp }}"]
    """
    (cell,) = plan(tmp_path, play)
    assert cell.bench.argv == (sys.executable, "gpu1", "gpu", "gpu1,gpu2", "8")


def test_secrets_by_name_pattern_and_by_list(tmp_path: Path) -> None:
    play = """
    name: secrets
    hosts: gpu1
    secrets: [MY_PASS_PHRASE]
    vars: {hf_token: abc}
    env: {HF_TOKEN: "{{ hf_token }}", MY_PASS_PHRASE: x, PLAIN: y}
    bench: {command: b}
    """
    (cell,) = plan(tmp_path, play)
    assert "HF_TOKEN" in cell.secrets and "MY_PASS_PHRASE" in cell.secrets
    assert "PLAIN" not in cell.secrets


def test_limit_narrows_and_a_limit_outside_the_play_is_an_error(tmp_path: Path) -> None:
    assert {c.host for c in plan(tmp_path, BASE, limit="gpu2")} == {"gpu2"}
    with pytest.raises(InputError) as err:
        plan(tmp_path, BASE, limit="cpu1")
    assert err.value.render().startswith("--limit: 'cpu1' matches no host of this play")
    assert err.value.key_path == "--limit"
    assert err.value.location is None  # typed on the command line, not in the playbook


def test_a_limit_matching_no_host_points_at_the_command_line_not_the_playbook(
    tmp_path: Path,
) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, BASE, limit="nosuch")
    assert err.value.location is None and err.value.key_path == "--limit"
    assert err.value.render().startswith("--limit: pattern 'nosuch' matches no host (known")
    with pytest.raises(InputError) as err:
        plan(tmp_path, BASE, limit="gpu1,gpu9")
    assert err.value.location is None and err.value.key_path == "--limit"
    assert "'gpu9' in pattern 'gpu1,gpu9' names no group or host" in err.value.message


def test_a_bad_hosts_pattern_still_points_at_the_playbook(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        plan(tmp_path, BASE.replace("hosts: gpu", "hosts: gpux"), limit="gpu1")
    assert err.value.key_path == "hosts"
    assert err.value.location is not None and err.value.location.line == 3


def test_where_sees_host_vars(tmp_path: Path) -> None:
    play = """
    name: where
    hosts: gpu
    matrix: {tp_try: [4, 8], where: "matrix.tp_try == tp"}
    bench: {command: "b {{ matrix.tp_try }}"}
    """
    cells = plan(tmp_path, play)
    assert [(c.host, c.axes["tp_try"]) for c in cells] == [("gpu1", 4), ("gpu2", 8)]


def test_duplicate_points_are_an_error_naming_both(tmp_path: Path) -> None:
    play = """
    name: dup
    matrix: {x: [1, 2], include: [{x: 2}]}
    bench: {command: "b {{ matrix.x }}"}
    """
    with pytest.raises(InputError) as err:
        plan(tmp_path, play, inventory=None)
    assert "duplicate cell" in err.value.message
    assert "matrix and matrix.include[0]" in err.value.message
    assert err.value.key_path == "matrix.include[0]"


def test_timeouts_give_section_defaults(tmp_path: Path) -> None:
    play = """
    name: t
    repo: {url: /r, dest: /d, version: main}
    server: {command: srv, port: 1, ready: {path: /h}}
    bench: {command: b}
    timeouts: {cell: 60, setup: 30, ready: 20, bench: 10}
    """
    (cell,) = plan(tmp_path, play, inventory=None)
    assert cell.cell_timeout == 60 and cell.repo is not None and cell.repo.setup_timeout == 30
    assert cell.server is not None and cell.server.ready.timeout == 20
    assert cell.bench.timeout == 10


def test_adapter_errors_get_the_playbook_location(tmp_path: Path) -> None:
    play = """
    name: t
    server: {command: srv, ready: {path: /health}}
    bench: {command: b}
    """
    with pytest.raises(InputError) as err:
        plan(tmp_path, play, inventory=None)
    assert err.value.location is not None and err.value.location.line == 3
    assert err.value.key_path == "server.ready.path"


def test_where_result_is_memoised_per_axis_values_it_reads(tmp_path: Path) -> None:
    play = """
    name: where
    matrix: {a: [1, 2, 3], b: [1, 2, 3], c: [x, y], where: "matrix.a == matrix.b"}
    bench: {command: "b {{ matrix.a }} {{ matrix.c }}"}
    """
    cells = plan(tmp_path, play, inventory=None)
    assert [(c.axes["a"], c.axes["b"], c.axes["c"]) for c in cells] == [
        (a, a, c) for a in (1, 2, 3) for c in ("x", "y")
    ]


def test_axis_values_equal_across_types_are_not_conflated(tmp_path: Path) -> None:
    play = """
    name: types
    matrix: {v: [1, true, 1.0, "1"]}
    bench: {command: ["b", "{{ matrix.v }}"]}
    """
    cells = plan(tmp_path, play, inventory=None)
    assert [c.bench.argv[1] for c in cells] == ["1", "true", "1.0", "1"]
    assert len({c.id for c in cells}) == 4


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("matrix.nccl ==", "unexpected end of the expression"),
        ("(matrix.nccl == 'tuned'", "unexpected end of the expression, expected ')'"),
        ("matrix.nccl 'tuned'", "unexpected string 'tuned' after a complete expression"),
    ],
)
def test_a_where_syntax_error_is_reported_in_the_users_own_text(
    tmp_path: Path, where: str, needle: str
) -> None:
    play = BASE.replace(
        "  nccl: [default, tuned]\n", f'  nccl: [default, tuned]\n  where: "{where}"\n'
    )
    assert "where:" in play
    with pytest.raises(InputError) as err:
        plan(tmp_path, play)
    assert err.value.key_path == "matrix.where"
    assert err.value.location is not None and err.value.location.line == 12
    assert f"syntax error in the expression {where!r}: {needle}" in err.value.message
    if "(" not in where:
        assert "')'" not in err.value.render()  # the wrapping parenthesis the user never wrote


def test_a_where_in_braces_and_an_unknown_filter_keep_their_messages(tmp_path: Path) -> None:
    play = BASE.replace(
        "  nccl: [default, tuned]\n", '  nccl: [default, tuned]\n  where: "matrix.nccl | nosuch"\n'
    )
    with pytest.raises(InputError, match="unknown filter 'nosuch'"):
        plan(tmp_path, play)
    play = BASE.replace(
        "  nccl: [default, tuned]\n",
        "  nccl: [default, tuned]\n  where: \"{{ matrix.nccl == 'tuned' }}\"\n",
    )
    assert {c.axes["nccl"] for c in plan(tmp_path, play)} == {"tuned"}


SECRET_PLAY = """
name: secrets
hosts: gpu1
secrets: [license]
vars:
  hf_token: hf_playbook_default_1
  license: LIC-0001
  creds: {api_key: nested-key-0001}
  token_by_axis: {a: per-axis-AAAA, b: per-axis-BBBB}
  pass_token: "{{ token_by_axis[matrix.x] }}"
matrix:
  x: [a, b]
repo:
  url: "https://u:{{ hf_token }}@example.com/r.git"
  dest: /srv/r
  version: main
env: {HF_TOKEN: "{{ hf_token }}", SHORT_KEY: "ab", MODEL: "m"}
server:
  adapter: sglang
  args:
    model-path: /m
    api-key: "{{ creds.api_key }}"
    served-model-name: "{{ license }}"
    x: "{{ pass_token }}"
bench:
  command: [bench, "--token={{ hf_token }}", "--pass", "{{ pass_token }}"]
"""


def _secret_plan(tmp_path: Path, **extra: Any) -> list[Cell]:
    return plan(tmp_path, SECRET_PLAY, extra=extra or None)


def test_cell_ids_do_not_depend_on_secret_values(tmp_path: Path) -> None:
    first = _secret_plan(tmp_path)
    assert first[0].bench.argv[1] == "--token=hf_playbook_default_1"  # the cell keeps the value
    rotated = _secret_plan(
        tmp_path,
        hf_token="hf_rotated_by_cli_2",
        license="LIC-9999",
        creds={"api_key": "nested-key-9999"},
        token_by_axis={"a": "per-axis-CCCC", "b": "per-axis-DDDD"},
    )
    assert rotated[0].bench.argv[1] == "--token=hf_rotated_by_cli_2"
    assert [c.id for c in first] == [c.id for c in rotated]
    assert len({c.id for c in first}) == 2  # the axis still tells the points apart
    # A short secret env value is masked by its name too.
    (tmp_path / "short").mkdir()
    short = plan(tmp_path / "short", SECRET_PLAY.replace('"ab"', '"zz"'))
    assert [c.id for c in short] == [c.id for c in first]


def test_cell_ids_still_depend_on_everything_that_is_not_secret(tmp_path: Path) -> None:
    ids = [c.id for c in _secret_plan(tmp_path)]
    for old, new in [
        ('MODEL: "m"', 'MODEL: "n"'),
        ("model-path: /m", "model-path: /n"),
        ("example.com", "example.org"),
        ('"--pass"', '"--pas"'),
    ]:
        (tmp_path / old[:3]).mkdir(exist_ok=True)
        changed = plan(tmp_path / old[:3], SECRET_PLAY.replace(old, new))
        assert set(ids).isdisjoint(c.id for c in changed), old


def test_secret_cell_ids_match_cell_py_given_the_secret_values(tmp_path: Path) -> None:
    for c in _secret_plan(tmp_path):
        masks = {  # value -> name; a value under two names (HF_TOKEN, hf_token): the first
            "hf_playbook_default_1": "HF_TOKEN",
            "LIC-0001": "license",
            "nested-key-0001": "api_key",
            f"per-axis-{c.axes['x'].upper() * 4}": "pass_token",
            "ab": "SHORT_KEY",
        }
        assert c.id == cell_id(c.axes, c.host, cell_spec(c), masks)
        assert c.id != cell_id(c.axes, c.host, cell_spec(c))
        text = cell_id_text(c.host, cell_spec(c), masks)  # what is hashed holds no secret
        assert not [v for v in masks if len(v) > 2 and v in text]
        assert '"SHORT_KEY":"<secret:SHORT_KEY>"' in text


def test_masking_nothing_hashes_the_plain_spec(tmp_path: Path) -> None:
    for c in plan(tmp_path, BASE):
        assert cell_id(c.axes, c.host, cell_spec(c), {"value-found-nowhere": "x"}) == c.id


def test_mask_secrets_finds_values_as_json_writes_them() -> None:
    from orchestrator.cell import canonical_json
    from orchestrator.cell_ids import mask_secrets

    tricky = 'to"k\\en-€'
    text = canonical_json({"argv": [f"--t={tricky}", "1", "12"], "n": 1})
    masked = mask_secrets(text, {tricky: "tok", "1": "short"})
    assert masked == '{"argv":["--t=<secret:tok>","<secret:short>","12"],"n":1}'
