"""Templates made to hang `orch plan` or exhaust memory end as one located error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config.templates import limits as template_limits
from orchestrator.config.templates.render import TemplateEngine, VariableScope
from orchestrator.errors import InputError, SourceLocation

PLAYBOOK = """\
name: t
hosts: all
vars:
  x: {template}
server:
  command: echo {{{{ x }}}}
bench:
  command: echo
"""

BOMBS = {
    "loops": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "center": "{{ 'x' | center(999999999) }}",
    "indent": "{{ 'x\\ny' | indent(999999999) }}",
    "format": "{{ '%0999999999d' | format(1) }}",
    "percent": "{{ '%0999999999d' % 1 }}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
}
REASONS = {
    "loops": "more than 1,000,000 loop iterations and calls",
    "center": "the center filter's result would be longer than 1,000,000 characters or items",
    "indent": "the indent filter's result would be longer than 1,000,000 characters or items",
    "format": "a formatted field would be longer than 1,000,000 characters or items",
    "percent": "a formatted field would be longer than 1,000,000 characters or items",
    "doubling": "a '~' result would be longer than 1,000,000 characters or items",
}


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_template_bomb_is_refused_where_it_is_written(tmp_path: Path, bomb: str) -> None:
    (tmp_path / "bomb.yml").write_text(PLAYBOOK.format(template=json.dumps(BOMBS[bomb])))
    argv = [sys.executable, "-m", "orchestrator", "plan", "bomb.yml"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    prefix = "error: bomb.yml:4:3: vars.x: unsafe template refused by the sandbox: "
    assert lines[0] == prefix + REASONS[bomb], lines[0]


def render(source: str) -> object:
    engine = TemplateEngine()
    scope = VariableScope(engine, dict(engine.globals), {})
    return engine.render_text(source, scope, ("x",), lambda _: SourceLocation("f.yml", 1, 1))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ [1, 2, 3] | join(',') }}", "1,2,3"),
        ("{{ '%05d' % 3 }}-{{ '%s/%s' % ('a', 'b') }}", "00003-a/b"),
        ("{{ '{:>4}'.format(1) }}|{{ 'ab' | center(6) }}|{{ 'a\nb' | indent(2, true) }}", None),
        (
            "{% for x in [1, 2] %}{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}",
            None,
        ),
        ("{% for x in [] %}x{% else %}none{% endfor %}", "none"),
        ("{{ [1] + [2] }}", [1, 2]),
        ("{{ 'a' ~ 1 ~ 'b' }}", "a1b"),
        ("{% set s %}a{{ 1 }}b{% endset %}{{ s }}", "a1b"),
        ("{{ range(3) | batch(2) | list }}", [[0, 1], [2]]),
        ("{{ [[1], [2]] | sum(start=[]) }}", [1, 2]),
    ],
)
def test_ordinary_templates_render_as_before(source: str, expected: object) -> None:
    out = render(source)
    if expected is not None:
        assert out == expected
    elif "loop" in source:
        assert out == "1/2 2/2 "
    else:
        assert out == "   1|  ab  |  a\n  b"


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x'.ljust(999999999) }}",
        "{{ '{:>{}}'.format(1, 999999999) }}",
        "{{ ('y' * 1000000).join(range(100000) | map('string')) }}",
        "{{ range(100000) | join('y' * 1000) }}",
        "{% set l = [1] %}{% for i in range(64) %}{{ l.extend(l) }}{% endfor %}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
        "{% endfor %}",
        "{% set s %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}{{ s }}",
        "{{ [] | slice(999999999) | list }}",
    ],
)
def test_other_ways_to_build_huge_values_are_refused(source: str) -> None:
    with pytest.raises(InputError, match=r"unsafe template refused by the sandbox: .*longer than"):
        render(source)


def test_a_render_is_bounded_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_limits, "MAX_SECONDS", 0.2)
    fan_out = (
        "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}"
    )
    with pytest.raises(InputError, match=r"rendering took longer than 0\.2 s"):
        render(fan_out)
