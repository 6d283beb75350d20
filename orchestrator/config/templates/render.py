"""Sandboxed, native-typed Jinja2 rendering of playbook data (`TemplateEngine`).

Used by config/playbook.py and plan/; the rules they rely on: docs/ARCHITECTURE.md, "The playbook".
"""

from __future__ import annotations

import operator
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.meta import find_undeclared_variables
from jinja2.nativetypes import NativeCodeGenerator
from jinja2.runtime import Context, Undefined
from jinja2.utils import missing

from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.templates.errors import UndefinedName, render_error, syntax_error
from orchestrator.config.templates.limits import BoundedSandbox, bounded_output, render_budget
from orchestrator.errors import InputError, SourceLocation

Locate = Callable[[KeyPath], SourceLocation]

# Results bigger than this from `*` or `**` are refused: a template must not exhaust memory or time.
MAX_SEQUENCE_LENGTH = 1_000_000
MAX_POWER_EXPONENT = 1_000

_TEMPLATE_MARKERS = ("{{", "{%", "{#")


def has_template(text: str) -> bool:
    """True when `text` holds Jinja syntax; the fast path that skips plain strings."""
    return "{" in text and ("{{" in text or "{%" in text or "{#" in text)


class ShellWord(str):
    """A string already quoted for a shell: shell mode inserts it as is."""

    __slots__ = ()


def shquote(value: Any) -> ShellWord:
    """The `shquote` filter: one shell word (a list becomes quoted words joined by spaces)."""
    if isinstance(value, ShellWord):
        return value
    if isinstance(value, list | tuple):
        return ShellWord(" ".join(shlex.quote(_word(v)) for v in value))
    return ShellWord(shlex.quote(_word(value)))


def _word(value: Any) -> str:
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    if isinstance(value, Mapping):
        raise TypeError("a mapping cannot be inserted into shell text (use a list, or | tojson)")
    return value if isinstance(value, str) else str(value)


class _StrictUndefined(StrictUndefined):
    __slots__ = ()

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> NoReturn:
        if self._undefined_exception is not UndefinedError:  # sandbox violations keep their type
            raise self._undefined_exception(self._undefined_message)
        raise UndefinedName(self._undefined_message, self._undefined_name, self._undefined_obj)


# Undefined binds its operators (`<`, `+`, `==`, ...) to the base method at class creation: point
# them at the override too, so every use of an undefined value says which name it was.
for _base in (Undefined, StrictUndefined):
    for _name, _value in list(vars(_base).items()):
        if _value is Undefined._fail_with_undefined_error and _name.startswith("__"):
            setattr(_StrictUndefined, _name, _StrictUndefined._fail_with_undefined_error)


class _CodeGenerator(NativeCodeGenerator):
    def _output_const_repr(self, group: Iterable[Any]) -> str:
        # A lone constant keeps its type ("{{ 30000 }}" is an int), as a lone variable does.
        items = list(group)
        if len(items) == 1:
            return repr(items[0])
        return repr("".join(str(v) for v in items))


def _check_defined(value: Any) -> None:
    """Raise for an undefined value hidden anywhere in a rendered container."""
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    if isinstance(value, dict):
        for k, v in value.items():
            _check_defined(k)
            _check_defined(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _check_defined(v)


def _concat(values: Iterator[Any]) -> Any:
    parts = list(values)
    if len(parts) == 1:
        value = parts[0]
        kind = type(value)
        if kind is str:
            return value
        if kind is ShellWord:
            return str(value)
        if isinstance(value, Undefined | dict | list | tuple):
            _check_defined(value)
        return value
    if not parts:
        return ""
    return "".join([v if type(v) is str else str(v) for v in parts])


def _shell_finalize(value: Any) -> str:
    if isinstance(value, ShellWord):
        return value
    if isinstance(value, list | tuple):
        return shquote(value)
    return shlex.quote(_word(value))


def _guarded_mul(left: Any, right: Any) -> Any:
    for seq, n in ((left, right), (right, left)):
        if (
            isinstance(seq, str | list | tuple)
            and isinstance(n, int)
            and len(seq) * n > MAX_SEQUENCE_LENGTH
        ):
            raise SecurityError(f"result longer than {MAX_SEQUENCE_LENGTH} items")
    return operator.mul(left, right)


def _guarded_pow(left: Any, right: Any) -> Any:
    if isinstance(right, int) and abs(right) > MAX_POWER_EXPONENT:
        raise SecurityError(f"exponent larger than {MAX_POWER_EXPONENT}")
    return operator.pow(left, right)


class TemplateEnvironment(BoundedSandbox):
    """The sandboxed native-typed environment every playbook string is rendered in."""

    code_generator_class = _CodeGenerator
    concat = staticmethod(_concat)  # type: ignore[assignment]
    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, *, shell: bool = False) -> None:
        super().__init__(
            undefined=_StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            finalize=_shell_finalize if shell else None,
        )
        self.shell = shell
        self.binop_table["*"] = _guarded_mul
        self.binop_table["**"] = _guarded_pow
        self.filters["shquote"] = shquote
        self.filters.pop("random", None)  # nondeterministic: cells must render the same every run
        self.globals.pop("lipsum", None)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Attribute access that prefers mapping keys over dict methods."""
        if type(obj) is dict and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)


@dataclass(frozen=True)
class TemplateRefs:
    """What a template reads: free names, and which matrix axes (None: the whole matrix)."""

    names: frozenset[str]
    axes: frozenset[str] | None


_NO_REFS = TemplateRefs(frozenset(), frozenset())


@dataclass(frozen=True)
class VarDecl:
    """A variable as declared: its raw value and where it was written."""

    value: Any
    path: KeyPath
    locate: Locate


class TemplateEngine:
    """Compiles (once per source text) and renders templates; caches are per engine."""

    def __init__(self) -> None:
        self.plain = TemplateEnvironment(shell=False)
        self.shell = TemplateEnvironment(shell=True)
        self.globals: dict[str, Any] = dict(self.plain.globals)
        self._compiled: dict[tuple[bool, str], Any] = {}
        self._refs: dict[str, TemplateRefs] = {}

    # -- compile and analyse -------------------------------------------------------------------

    def compile(self, source: str, *, shell: bool, where: SourceLocation, key_path: str) -> Any:
        """The compiled template for `source` (cached); syntax errors become InputError."""
        key = (shell, source)
        tmpl = self._compiled.get(key)
        if tmpl is None:
            env = self.shell if shell else self.plain
            try:
                tmpl = env.from_string(source)
            except TemplateSyntaxError as exc:
                raise syntax_error(exc, where, key_path, env) from None
            except Exception as exc:  # a sandbox refusal while compiling, or similar
                raise InputError(
                    f"cannot compile template: {exc}", location=where, key_path=key_path
                ) from None
            self._compiled[key] = tmpl
        return tmpl

    def refs(self, source: str, *, where: SourceLocation, key_path: str) -> TemplateRefs:
        """The names and matrix axes `source` reads (cached)."""
        found = self._refs.get(source)
        if found is not None:
            return found
        if not has_template(source):
            self._refs[source] = _NO_REFS
            return _NO_REFS
        try:
            ast = self.plain.parse(source)
            # Compiles the template: an unknown filter or test is found here, not by parse().
            names = frozenset(find_undeclared_variables(ast))
        except TemplateSyntaxError as exc:
            raise syntax_error(exc, where, key_path, self.plain) from None
        axes: frozenset[str] | None = frozenset()
        if "matrix" in names:
            named: set[str] = set()
            seen: set[int] = set()
            for node in ast.find_all(nodes.Getattr):
                if isinstance(node.node, nodes.Name) and node.node.name == "matrix":
                    named.add(node.attr)
                    seen.add(id(node.node))
            for item in ast.find_all(nodes.Getitem):
                arg = item.arg
                if (
                    isinstance(item.node, nodes.Name)
                    and item.node.name == "matrix"
                    and isinstance(arg, nodes.Const)
                    and isinstance(arg.value, str)
                ):
                    named.add(arg.value)
                    seen.add(id(item.node))
            axes = frozenset(named)
            for name_node in ast.find_all(nodes.Name):
                if name_node.name == "matrix" and id(name_node) not in seen:
                    axes = None  # the matrix is used as a whole: depends on every axis
                    break
        found = TemplateRefs(names, axes)
        self._refs[source] = found
        return found

    def tree_refs(self, value: Any, path: KeyPath, locate: Locate) -> TemplateRefs:
        """Union of the refs of every templated string (keys included) in a data tree."""
        names: set[str] = set()
        axes: set[str] | None = set()
        for text, where_path in _template_strings(value, path):
            r = self.refs(text, where=locate(where_path), key_path=format_key_path(where_path))
            names |= r.names
            if r.axes is None:
                axes = None
            elif axes is not None:
                axes |= r.axes
        return TemplateRefs(frozenset(names), None if axes is None else frozenset(axes))

    # -- render --------------------------------------------------------------------------------

    def render_text(
        self,
        source: str,
        scope: VariableScope,
        path: KeyPath,
        locate: Locate,
        *,
        shell: bool = False,
    ) -> Any:
        """Render one string; a plain string is returned unchanged."""
        if not has_template(source):
            return source
        where = locate(path)
        key_path = format_key_path(path)
        tmpl = self.compile(source, shell=shell, where=where, key_path=key_path)
        try:
            ctx = Context(tmpl.environment, scope, None, {}, None)  # type: ignore[arg-type]
            with render_budget():  # loop steps, calls, output size and time: template_limits.py
                return _concat(bounded_output(tmpl.root_render_func(ctx)))
        except InputError:
            raise
        except Exception as exc:
            raise render_error(exc, scope, where, key_path) from None

    def render_tree(
        self,
        value: Any,
        scope: VariableScope,
        path: KeyPath,
        locate: Locate,
        shell_paths: frozenset[KeyPath] = frozenset(),
    ) -> Any:
        """Render every string of a data tree (mapping keys too); returns new containers."""
        kind = type(value)
        if kind is str:
            if not has_template(value):
                return value
            return self.render_text(value, scope, path, locate, shell=path in shell_paths)
        if kind is dict:
            out: dict[Any, Any] = {}
            for k, v in value.items():
                if type(k) is str and has_template(k):
                    k = self.render_text(k, scope, (*path, k), locate)
                    if not isinstance(k, str | int | float | bool):
                        raise InputError(
                            f"a mapping key must render to a scalar, got {type(k).__name__}",
                            location=locate((*path,)),
                            key_path=format_key_path(path),
                        )
                out[k] = self.render_tree(v, scope, (*path, k), locate, shell_paths)
            return out
        if kind is list or kind is tuple:
            return [
                self.render_tree(v, scope, (*path, i), locate, shell_paths)
                for i, v in enumerate(value)
            ]
        return value

    def render_expression(
        self, expression: str, scope: VariableScope, path: KeyPath, locate: Locate
    ) -> Any:
        """Evaluate a bare Jinja expression (`where:`); `{{ }}`-wrapped text is accepted too."""
        return self.render_text(expression_source(expression), scope, path, locate)


def expression_source(expression: str) -> str:
    """The template text a bare `where:` expression is rendered (and analysed) as."""
    return expression if has_template(expression) else "{{ (" + expression + ") }}"


def _template_strings(value: Any, path: KeyPath) -> Iterator[tuple[str, KeyPath]]:
    if isinstance(value, str):
        if has_template(value):
            yield value, path
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and has_template(k):
                yield k, (*path, k)
            yield from _template_strings(v, (*path, k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _template_strings(v, (*path, i))


class VariableScope(Mapping[str, Any]):
    """The names a template sees, with variables rendered lazily on first use.

    `fixed` names are plain values (built-ins such as `matrix`, Jinja globals). `decls` are
    variables rendered the first time they are read. A scope may delegate to a `shared` one
    (the host's) for every variable not in `local_names`, so variables that do not depend on the
    matrix are rendered once per host, not once per cell.
    """

    __slots__ = ("_resolving", "decls", "engine", "fixed", "local_names", "resolved", "shared")

    def __init__(
        self,
        engine: TemplateEngine,
        fixed: dict[str, Any],
        decls: Mapping[str, VarDecl],
        *,
        shared: VariableScope | None = None,
        local_names: frozenset[str] = frozenset(),
    ) -> None:
        self.engine = engine
        self.fixed = fixed
        self.decls = decls
        self.shared = shared
        self.local_names = local_names
        self.resolved: dict[str, Any] = {}
        self._resolving: list[str] = []

    def __getitem__(self, name: str) -> Any:
        value = self.fixed.get(name, missing)
        if value is not missing:
            return value
        value = self.resolved.get(name, missing)
        if value is not missing:
            return value
        if self.shared is not None and name not in self.local_names:
            return self.shared[name]
        decl = self.decls[name]
        if name in self._resolving:
            chain = " -> ".join([*self._resolving[self._resolving.index(name) :], name])
            raise InputError(
                f"variables reference each other in a cycle: {chain}",
                location=decl.locate(decl.path),
                key_path=format_key_path(decl.path),
            )
        self._resolving.append(name)
        try:
            value = self.engine.render_tree(decl.value, self, decl.path, decl.locate)
        finally:
            self._resolving.pop()
        self.resolved[name] = value
        return value

    def __contains__(self, name: object) -> bool:
        if name in self.fixed or name in self.decls:
            return True
        return self.shared is not None and name in self.shared

    def __iter__(self) -> Iterator[str]:
        names = dict.fromkeys(self.fixed)
        names.update(dict.fromkeys(self.decls))
        if self.shared is not None:
            names.update(dict.fromkeys(self.shared))
        return iter(names)

    def __len__(self) -> int:
        return sum(1 for _ in self)
