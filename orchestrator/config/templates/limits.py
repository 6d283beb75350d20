"""What one template may cost: loop steps, calls, the size of what it builds, and time.

`BoundedSandbox`, which render.py subclasses; going over raises `TemplateLimitError`, a refusal.
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment
from jinja2.visitor import NodeTransformer

MAX_STEPS = 1_000_000  # loop iterations plus calls, per render
MAX_SECONDS = 5.0  # per render; checked at every step and every piece of output
MAX_LENGTH = 1_000_000  # characters (or items) of any one value a template builds, or its output

_LOOP_FILTER = "orch_bounded_loop"  # wraps every `{% for %}`'s iterable: counts its steps
_JOIN_FILTER = "orch_bounded_join"  # replaces `~`: joins after checking the total length


class TemplateLimitError(SecurityError):
    """A template went over one of its bounds."""


@dataclass
class _Budget:
    deadline: float
    steps: int = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise TemplateLimitError(f"more than {MAX_STEPS:,} loop iterations and calls")
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(f"rendering took longer than {MAX_SECONDS:g} s")


_BUDGET: ContextVar[_Budget | None] = ContextVar("orch_template_budget", default=None)


@contextmanager
def render_budget() -> Iterator[None]:
    """Count steps and time for one render; a render nested in it (a variable) shares it."""
    if _BUDGET.get() is not None:
        yield
        return
    token = _BUDGET.set(_Budget(time.monotonic() + MAX_SECONDS))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _step() -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.step()


def bounded_output(parts: Iterable[Any]) -> Iterator[Any]:
    """`parts` (a template's output), refused once its text passes MAX_LENGTH or time is up."""
    budget = _BUDGET.get()
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += len(part)
            _check_length(total, "the template's output")
        if budget is not None:
            budget.check_time()
        yield part


def _check_length(length: int, what: str) -> None:
    if length > MAX_LENGTH:
        raise TemplateLimitError(f"{what} would be longer than {MAX_LENGTH:,} characters or items")


def _width(value: Any) -> int:
    return value if isinstance(value, int) else 0


# --- what a string operation would build, before it is built -------------------------------

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*\}")


def _check_format(fmt: str, args: Iterable[Any], *, braces: bool) -> None:
    """Refuse a format whose field widths or precisions (written, or `*`/`{}` from the
    arguments) are over MAX_LENGTH: `'%0999999999d' % 1` would build a gigabyte."""
    numbers: list[str] = []
    from_args = False
    if braces:
        for spec in _BRACE_SPEC.findall(fmt):
            numbers += re.findall(r"\d+", spec.partition(":")[2])
        from_args = bool(re.search(r"\{[^{}]*\{", fmt))
    else:
        for width, precision in _PERCENT_SPEC.findall(fmt):
            numbers += [n for n in (width, precision) if n and n != "*"]
            from_args = from_args or "*" in (width, precision)
    if from_args:
        numbers += [str(a) for a in args if isinstance(a, int)]
    for number in numbers:
        _check_length(int(number), "a formatted field")


def _replaced_length(text: Any, old: Any, new: Any, count: Any) -> int:
    if not isinstance(text, str) or not isinstance(old, str):
        return 0  # bytes.replace is left alone: a template only reaches bytes via .encode()
    found = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * (len(new) - len(old)) if isinstance(new, str) else 0


def _joined_length(separator: Any, items: list[Any]) -> int:
    size = sum(len(i) for i in items if isinstance(i, str | bytes))
    return size + len(separator) * max(len(items) - 1, 0) if isinstance(separator, str) else size


def _check_method(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Refuse a str or list method call that would build a value over MAX_LENGTH; the
    arguments to call it with (an iterable to `join` is read once, here)."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str | bytes) and name in ("center", "ljust", "rjust", "zfill"):
        _check_length(_width(args[0] if args else kwargs.get("width")), f"str.{name}()")
    elif isinstance(owner, str):
        if name == "expandtabs":
            size = _width(args[0] if args else kwargs.get("tabsize", 8))
            _check_length(len(owner) + owner.count("\t") * size, "str.expandtabs()")
        elif name == "replace" and len(args) >= 2:
            count = args[2] if len(args) > 2 else kwargs.get("count", -1)
            _check_length(_replaced_length(owner, args[0], args[1], count), "str.replace()")
        elif name == "join" and args:
            items = list(args[0])
            _check_length(_joined_length(owner, items), "str.join()")
            return (items, *args[1:])
    elif isinstance(owner, list) and name == "extend" and args and hasattr(args[0], "__len__"):
        _check_length(len(owner) + len(args[0]), "list.extend()")
    return args


# --- filters: the same checks, on the filters that can build big values ---------------------


def _check_filter(name: str, a: dict[str, Any]) -> None:
    """Refuse a call of filter `name` (its bound arguments `a`) that would build too much."""
    size = 0
    if name == "center":
        size = _width(a["width"])
    elif name == "indent":
        width, text = a["width"], str(a["s"])
        size = len(text) + (text.count("\n") + 1) * (_width(width) or len(str(width)))
    elif name == "format":
        _check_format(str(a["value"]), [*a["args"], *a["kwargs"].values()], braces=False)
    elif name == "replace":
        size = _replaced_length(str(a["s"]), a["old"], a["new"], a["count"])
    elif name == "join":
        size = _joined_length(a["d"], a["value"])
    elif name == "wordwrap":
        text = str(a["s"])
        lines = len(text) // max(_width(a["width"]), 1) + text.count("\n") + 1
        size = len(text) + lines * len(a["wrapstring"] or "\n")
    elif name in ("batch", "slice"):
        size = _width(a["linecount" if name == "batch" else "slices"])
    elif name == "sum" and a["attribute"] is None and hasattr(a["start"], "__len__"):
        size = len(a["start"]) + sum(len(i) for i in a["iterable"] if hasattr(i, "__len__"))
    _check_length(size, f"the {name} filter's result")


# The arguments each bounded filter takes from a template (after any context Jinja passes).
_FILTER_ARGUMENTS: dict[str, Callable[..., None]] = {
    "center": lambda value, width=80: None,
    "indent": lambda s, width=4, first=False, blank=False: None,
    "format": lambda value, *args, **kwargs: None,
    "replace": lambda s, old, new, count=None: None,
    "join": lambda value, d="", attribute=None: None,
    "wordwrap": lambda s, width=79, break_long_words=True, wrapstring=None, **_: None,
    "batch": lambda value, linecount, fill_with=None: None,
    "slice": lambda value, slices, fill_with=None: None,
    "sum": lambda iterable, attribute=None, start=0: None,
}
_MATERIALIZED = {"join": "value", "sum": "iterable"}  # iterables the check must read first


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(_FILTER_ARGUMENTS[name])
    passed = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)  # keeps jinja_pass_arg: the filter gets the same first argument
    def bounded(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args[passed:], **kwargs)
        except TypeError:
            return func(*args, **kwargs)  # let the filter report its own misuse
        bound.apply_defaults()
        listed = _MATERIALIZED.get(name)
        if listed is not None:
            bound.arguments[listed] = list(bound.arguments[listed])
        _check_filter(name, bound.arguments)
        return func(*args[:passed], *bound.args, **bound.kwargs)

    return bounded


# --- operators ---------------------------------------------------------------------------


def _guarded_add(left: Any, right: Any) -> Any:
    if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
        _check_length(len(left) + len(right), "a '+' result")
    return operator.add(left, right)


def _guarded_mod(left: Any, right: Any) -> Any:
    if isinstance(left, str):
        args = right if isinstance(right, tuple) else (right,)
        _check_format(left, args, braces=False)
    return operator.mod(left, right)


def _bounded_loop(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        _step()
        yield item


def _bounded_join(parts: tuple[Any, ...]) -> str:
    texts = [p if isinstance(p, str) else str(p) for p in parts]
    _check_length(sum(len(t) for t in texts), "a '~' result")
    return "".join(texts)


class _BoundLoops(NodeTransformer):
    """Routes every `{% for %}` iterable and every `~` through the bounded filters."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        items = nodes.Tuple(node.nodes, "load", lineno=node.lineno)
        return nodes.Filter(items, _JOIN_FILTER, [], [], None, None, lineno=node.lineno)


class BoundedSandbox(SandboxedEnvironment):
    """A SandboxedEnvironment whose templates are held to this module's bounds."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.intercepted_binops = frozenset({*type(self).intercepted_binops, "+", "%"})
        self.binop_table["+"] = _guarded_add
        self.binop_table["%"] = _guarded_mod
        for name in _FILTER_ARGUMENTS:
            self.filters[name] = _bounded_filter(name, self.filters[name])
        self.filters[_LOOP_FILTER] = _bounded_loop
        self.filters[_JOIN_FILTER] = _bounded_join
        concat = self.concat  # block `{% set %}`s and macros join their output with it

        def bounded_concat(values: Iterable[Any]) -> Any:
            return concat(bounded_output(values))

        self.concat = bounded_concat  # type: ignore[method-assign]

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _BoundLoops().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree  # type: ignore[no-any-return]

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """The sandbox's `str.format`/`format_map`, refused when a field would be too wide."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__
        sandboxed = wrapped

        def bounded(*args: Any, **kwargs: Any) -> str:
            values = [*args, *kwargs.values()]
            if args and isinstance(args[0], dict):  # format_map
                values += list(args[0].values())
            _check_format(fmt, values, braces=True)
            return sandboxed(*args, **kwargs)

        return bounded

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A call from a template: one step, and refused when it would build too big a value."""
        _step()
        args = _check_method(obj, args, kwargs)
        return super().call(context, obj, *args, **kwargs)
