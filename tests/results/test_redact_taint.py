"""A variable a secret's template reads is secret too, in the playbook copy of a bundle."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.runner.redaction import tainted_secret_names, template_names
from orchestrator.secrets.redact import redact_playbook_copy, redact_yaml_text


def test_template_names_leave_out_strings_attributes_and_orch_names() -> None:
    text = (
        "Bearer {{ tok }} {{ matrix.spec }} {{ a | default('lit') }} {% if b %}{{ c }}{% endif %}"
    )
    assert template_names(text) == ["tok", "a", "default", "b", "c"]


def test_taint_follows_chains_across_documents_but_not_the_matrix() -> None:
    playbook = {
        "vars": {"part": "k-{{ raw }}", "spec_name": "{{ matrix.spec }}"},
        "env": {"HF_TOKEN": "Bearer {{ part }}", "MY_KEY": "{{ matrix.spec }}"},
        "matrix": {"spec": ["eagle3", "off"]},
    }
    assert tainted_secret_names([playbook, {"raw": "r"}]) == ["part", "raw"]


def test_a_read_value_is_hidden_in_its_own_file_as_valid_yaml() -> None:
    text = (
        "vars:\n  tok: TOKVALUEraw99887766\n  other: kept\nenv:\n  HF_TOKEN: 'Bearer {{ tok }}'\n"
    )
    out, values = redact_yaml_text(text)
    assert yaml.safe_load(out)["vars"] == {"tok": "***REDACTED***", "other": "kept"}
    assert "TOKVALUEraw99887766" in values


def test_copies_are_redacted_alike_whichever_file_comes_first(tmp_path: Path) -> None:
    for order in (["pb.yml", "vars.yml"], ["vars.yml", "pb.yml"]):
        copies = tmp_path / order[0] / "run" / "playbook"
        copies.mkdir(parents=True)
        (copies / "pb.yml").write_text("vars_files: [vars.yml]\nenv:\n  HF_TOKEN: 'x {{ tok }}'\n")
        (copies / "vars.yml").write_text("tok: TOKVALUEraw99887766\n")
        redact_playbook_copy(copies, [copies / name for name in order])
        assert yaml.safe_load((copies / "vars.yml").read_text()) == {"tok": "***REDACTED***"}
