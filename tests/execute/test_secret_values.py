"""Which values the controller redacts: secret names, listed names, and vars alike."""

from orchestrator.execute.controller import secret_values
from orchestrator.plan.cell import BenchSpec, Cell


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
