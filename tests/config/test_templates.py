"""Rendering: native types, shell quoting, the sandbox, lazy vars and error locations."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from orchestrator.config.keypath import KeyPath
from orchestrator.config.templates.render import TemplateEngine, VarDecl, VariableScope
from orchestrator.errors import InputError, SourceLocation

PWNED = ["$(touch /tmp/pwned)", "; rm -rf ~", "`id`", "a b", "'q'", '"dq"', "x && y | z > f"]


def locate(path: KeyPath) -> SourceLocation:
    return SourceLocation("play.yml", 7, 3)


def scope(engine: TemplateEngine, values: dict[str, Any], **fixed: Any) -> VariableScope:
    decls = {k: VarDecl(v, ("vars", k), locate) for k, v in values.items()}
    return VariableScope(engine, {**engine.globals, **fixed}, decls)


def render(
    text: str, values: dict[str, Any] | None = None, *, shell: bool = False, **fixed: Any
) -> Any:
    engine = TemplateEngine()
    return engine.render_text(
        text, scope(engine, values or {}, **fixed), ("x",), locate, shell=shell
    )


def test_a_lone_expression_keeps_its_native_type() -> None:
    assert render("{{ port }}", {"port": 30000}) == 30000
    assert render("{{ 30000 }}") == 30000
    assert render("{{ ratio }}", {"ratio": 0.5}) == 0.5
    assert render("{{ on }}", {"on": True}) is True
    nccl = {"tuned": {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": 32}}
    assert render("{{ nccl[matrix.n] }}", {"nccl": nccl}, matrix={"n": "tuned"}) == nccl["tuned"]


def test_mixed_text_is_text_and_text_is_never_evaluated() -> None:
    assert render("port={{ port }}", {"port": 30000}) == "port=30000"
    assert render("{{ a }}{{ b }}", {"a": 1, "b": 2}) == "12"
    assert render("{{ s }}", {"s": "30000"}) == "30000"  # a string variable stays a string
    assert render("{{ s }}", {"s": "[1, 2]"}) == "[1, 2]"


def test_plain_strings_pass_untouched() -> None:
    assert render("no templates } here {") == "no templates } here {"


@pytest.mark.parametrize("evil", PWNED)
def test_shell_mode_quotes_every_substituted_value(evil: str) -> None:
    text = render(
        "python -m srv --name {{ evil }} --port {{ port }}", {"evil": evil, "port": 1}, shell=True
    )
    assert shlex.split(text) == ["python", "-m", "srv", "--name", evil, "--port", "1"]


@pytest.mark.parametrize("evil", PWNED)
def test_shquote_filter_is_not_quoted_twice_in_shell_mode(evil: str) -> None:
    text = render("echo {{ evil | shquote }}", {"evil": evil}, shell=True)
    assert shlex.split(text) == ["echo", evil]
    assert shlex.split(render("echo {{ evil | shquote }}", {"evil": evil})) == ["echo", evil]


def test_shell_mode_quotes_list_items_one_by_one() -> None:
    text = render("run {{ extra }}", {"extra": ["--a", "b c", "$(x)"]}, shell=True)
    assert shlex.split(text) == ["run", "--a", "b c", "$(x)"]


def test_shell_mode_refuses_a_mapping() -> None:
    with pytest.raises(InputError, match="mapping cannot be inserted"):
        render("run {{ m }}", {"m": {"a": 1}}, shell=True)


def test_vars_reference_vars_lazily() -> None:
    values = {"model": "/m", "draft": "{{ model }}-draft", "spec": {"path": "{{ draft }}"}}
    assert render("{{ spec }}", values) == {"path": "/m-draft"}


def test_a_value_that_renders_to_a_template_is_not_rendered_again() -> None:
    assert render("{{ matrix.a }}", matrix={"a": "{{ secret }}"}) == "{{ secret }}"


def test_var_cycle_is_an_error_naming_the_chain() -> None:
    with pytest.raises(InputError) as err:
        render("{{ a }}", {"a": "{{ b }}", "b": "{{ a }}"})
    assert "cycle: a -> b -> a" in err.value.message
    assert err.value.key_path == "vars.a"


def test_undefined_variable_names_it_with_location_and_a_close_name() -> None:
    with pytest.raises(InputError) as err:
        render("--draft {{ drat }}", {"draft": "/d"})
    e = err.value
    assert e.message == "undefined variable 'drat'"
    assert e.hint == "did you mean 'draft'?"
    assert e.key_path == "x"
    assert e.render().startswith("play.yml:7:3: x: undefined variable 'drat'")


@pytest.mark.parametrize(
    ("text", "variables", "hint"),
    [
        ("{{ cluster }}", ["port"], "define it under vars:, in the inventory, or with -e"),
        ("{{ clustr }}", ["clusters", "port"], "did you mean 'clusters'?"),
        ("{{ rnage(3) | list }}", ["port"], "did you mean 'range'?"),  # a global, very close
    ],
)
def test_close_names_are_the_users_variables_before_jinja_globals(
    text: str, variables: list[str], hint: str
) -> None:
    """`cluster` is not offered Jinja's `cycler`: a typo is of a variable, not of a global."""
    with pytest.raises(InputError) as err:
        render(text, dict.fromkeys(variables, 1))
    assert err.value.hint == hint


def test_undefined_in_a_comparison_is_still_named() -> None:
    with pytest.raises(InputError, match="undefined variable 'limit'"):
        render("{{ 1 > limit }}")


def test_undefined_key_lists_the_keys() -> None:
    with pytest.raises(InputError) as err:
        render("{{ nccl.tuned }}", {"nccl": {"tunde": {}, "default": {}}})
    assert err.value.message == "undefined key 'tuned'"
    assert err.value.hint == "did you mean 'tunde'?"


def test_attribute_access_prefers_mapping_keys() -> None:
    assert render("{{ matrix.items }}", matrix={"items": 3}) == 3


@pytest.mark.parametrize(
    "text",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ 'a' * 100000000 }}",
        "{{ 2 ** 100000 }}",
    ],
)
def test_sandbox_refuses_unsafe_templates(text: str) -> None:
    with pytest.raises(InputError, match="unsafe template refused by the sandbox"):
        render(text)


def test_syntax_error_is_an_input_error() -> None:
    with pytest.raises(InputError) as err:
        render("{{ port ")
    assert err.value.message.startswith("template syntax error:")


def test_failing_expression_is_an_input_error_not_a_raw_exception() -> None:
    with pytest.raises(InputError, match="ZeroDivisionError"):
        render("{{ 1 / 0 }}")


def test_random_filter_is_gone_for_reproducible_cells() -> None:
    with pytest.raises(InputError, match="unknown filter 'random'"):
        render("{{ [1, 2] | random }}")


def test_render_tree_renders_keys_values_and_only_marked_paths_in_shell_mode() -> None:
    engine = TemplateEngine()
    s = scope(engine, {"flag": "tp-size", "n": 8, "evil": "$(x)"})
    tree = {"{{ flag }}": "{{ n }}", "command": "run {{ evil }}", "argv": ["{{ evil }}"]}
    out = engine.render_tree(tree, s, ("server",), locate, frozenset({("server", "command")}))
    assert out == {"tp-size": 8, "command": "run '$(x)'", "argv": ["$(x)"]}


def test_refs_find_the_axes_a_template_reads() -> None:
    engine = TemplateEngine()
    where = locate(())
    refs = engine.refs("{{ matrix.a }} {{ matrix['b'] }} {{ x }}", where=where, key_path="")
    assert refs.axes == frozenset({"a", "b"}) and refs.names == frozenset({"matrix", "x"})
    assert engine.refs("{{ matrix | length }}", where=where, key_path="").axes is None
