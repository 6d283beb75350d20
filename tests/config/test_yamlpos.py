"""YAML loading keeps 1-based positions of keys and values and rejects what YAML would hide."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.yamlpos import load_yaml, parse_yaml
from orchestrator.errors import InputError, SourceLocation

TEXT = """\
name: demo
server:
  args:
    - {model-path: /m, tp-size: 8}
    - "{{ spec }}"
  port: 30000
"""


def test_positions_of_keys_values_and_items() -> None:
    doc = parse_yaml(TEXT, "p.yml")
    assert doc.data["server"]["args"][0]["tp-size"] == 8
    assert doc.positions[("name",)] == SourceLocation("p.yml", 1, 1)
    assert doc.value_positions[("name",)] == SourceLocation("p.yml", 1, 7)
    assert doc.positions[("server", "args", 0)] == SourceLocation("p.yml", 4, 7)
    assert doc.positions[("server", "args", 0, "tp-size")] == SourceLocation("p.yml", 4, 24)
    assert doc.value_positions[("server", "args", 0, "tp-size")] == SourceLocation("p.yml", 4, 33)
    assert doc.positions[("server", "args", 1)] == SourceLocation("p.yml", 5, 7)
    assert doc.positions[("server", "port")] == SourceLocation("p.yml", 6, 3)


def test_locate_falls_back_to_the_nearest_ancestor() -> None:
    doc = parse_yaml(TEXT, "p.yml")
    assert doc.locate(("server", "args", 0, "nope")) == SourceLocation("p.yml", 4, 7)
    assert doc.locate(("nothing",)) == SourceLocation("p.yml", 1, 1)


def test_merge_keys_keep_the_anchor_position_and_explicit_keys_win() -> None:
    doc = parse_yaml("base: &b {a: 1, c: 2}\nx:\n  a: 5\n  <<: *b\n", "m.yml")
    assert doc.data["x"] == {"a": 5, "c": 2}
    assert doc.positions[("x", "a")] == SourceLocation("m.yml", 3, 3)
    assert doc.positions[("x", "c")] == SourceLocation("m.yml", 1, 17)


@pytest.mark.parametrize(
    ("text", "line", "col", "needle"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, 1, "duplicate key 'a' (first defined at line 1)"),
        ("a:\n\t- b\n", 2, 1, "indent with spaces"),
        ("a: [1, 2\n", 2, 1, "invalid YAML"),
        ("a:\n  b: 1\n c: 2\n", 3, 2, "check the indentation"),
        ("a: 1\n---\nb: 2\n", 2, 1, "second document"),
        ("x: *nope\n", 1, 4, "undefined alias"),
        ("? [a, b]\n: 1\n", 1, 3, "a mapping key must be a plain value"),
    ],
)
def test_broken_yaml_is_one_located_error(text: str, line: int, col: int, needle: str) -> None:
    with pytest.raises(InputError) as info:
        parse_yaml(text, "f.yml")
    assert info.value.location == SourceLocation("f.yml", line, col)
    assert needle in info.value.render()


def test_empty_file_is_an_error_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "empty.yml"
    path.write_text("# only a comment\n")
    with pytest.raises(InputError, match="the file is empty"):
        load_yaml(path)
    assert load_yaml(path, allow_empty=True).data is None


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="playbook not found"):
        load_yaml(tmp_path / "nope.yml", what="playbook")
    with pytest.raises(InputError, match="is a directory"):
        load_yaml(tmp_path)


def test_json_with_tabs_falls_back_to_the_json_parser(tmp_path: Path) -> None:
    path = tmp_path / "inv.json"
    path.write_text('{\n\t"all": {\n\t\t"hosts": ["a"]\n\t}\n}\n')
    assert load_yaml(path).data == {"all": {"hosts": ["a"]}}
    path.write_text('{\n\t"all": {\n\t\t"hosts": ["a"\n\t}\n}\n')
    with pytest.raises(InputError) as info:
        load_yaml(path)
    assert info.value.location is not None and info.value.location.line == 4
    assert "invalid JSON" in info.value.message
