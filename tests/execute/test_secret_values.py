"""Which values the controller redacts: secret names, listed names, and vars alike."""

from pathlib import Path

from orchestrator.cell import BenchSpec, Cell
from orchestrator.secrets.values import extra_vars_in_argv, secret_values


def _cell(env: dict[str, str], secrets: tuple[str, ...] = ()) -> Cell:
    return Cell(
        id="c",
        playbook="p",
        host="h",
        axes={},
        env=env,
        secrets=secrets,
        bench=BenchSpec(argv=("true",)),
    )


def test_env_values_of_secret_names_are_redacted() -> None:
    got = secret_values([_cell({"HF_TOKEN": "hf_abcdef", "NCCL_ALGO": "Ring"})], {})
    assert got == ["hf_abcdef"]


def test_listed_vars_are_redacted_even_with_harmless_names() -> None:
    cells = [_cell({"MODEL": "m"}, secrets=("license",))]
    got = secret_values(cells, {"license": "LIC-123456", "model": "public-model"})
    assert got == ["LIC-123456"]


def test_short_values_are_not_redacted_by_value() -> None:
    assert secret_values([_cell({"API_KEY": "abc"})], {}) == []


def test_nested_vars_and_secret_args_are_redacted() -> None:
    cell = _cell({}).model_copy(
        update={"bench": BenchSpec(argv=("b",), args={"api-key": "sk-from-args", "n": 1})}
    )
    got = secret_values([cell], {"db": {"password": "nested-pass"}, "model": "public-model"})
    assert got == ["nested-pass", "sk-from-args"]


def test_values_in_playbook_files_count_even_when_overridden(tmp_path: Path) -> None:
    base = tmp_path / "base.yml"
    base.write_text("vars:\n  hf_token: hf_overridden_in_base\n  license: LIC-BASE-1\n")
    got = secret_values([_cell({}, secrets=("license",))], {"hf_token": "hf_used"}, files=[base])
    assert got == sorted(["hf_overridden_in_base", "LIC-BASE-1", "hf_used"])


def test_every_extra_vars_argument_is_read_overridden_ones_too(tmp_path: Path) -> None:
    at_file = tmp_path / "extra.yml"
    at_file.write_text("hf_token: hf_from_at_file\n")
    argv = [
        "orch", "apply", "p.yml",
        "-e", f"@{at_file}",
        "-e", "hf_token=hf_first model=m",
        "--extra-vars={\"hf_token\": \"hf_json\"}",
        "-ehf_token=hf_glued",
        "-e", "not a valid item",
    ]  # fmt: skip
    got = extra_vars_in_argv(argv)
    assert got == [
        {"hf_token": "hf_from_at_file"},
        {"hf_token": "hf_first", "model": "m"},
        {"hf_token": "hf_json"},
        {"hf_token": "hf_glued"},
    ]
    assert secret_values([_cell({})], *got) == [
        "hf_first",
        "hf_from_at_file",
        "hf_glued",
        "hf_json",
    ]


def test_resume_hint_hides_secrets_by_pattern_and_by_the_runs_listed_names(
    tmp_path: Path,
) -> None:
    import json
    import shlex

    from orchestrator.execute.apply.resume import resume_hint

    run = tmp_path / "run-1"
    run.mkdir()
    (run / "plan.json").write_text(json.dumps({"cells": [{"id": "c", "secrets": ["license"]}]}))
    argv = ["orch", "apply", "p.yml", "-e", "hf_token=hf_real_1", "-e", "license=LIC-real-2"]
    command = shlex.join([*argv, "-e", "model=m", "--resume", str(run)])
    shown = resume_hint(command)
    assert shlex.split(shown) == [
        "orch", "apply", "p.yml", "-e", "hf_token=<secret>", "-e", "license=<secret>",
        "-e", "model=m", "--resume", str(run),
    ]  # fmt: skip
    bisect = "orch bisect ... --resume 20261130-x"  # no run directory: patterns only
    assert resume_hint(bisect) == bisect
