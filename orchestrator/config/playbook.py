"""Loading a playbook: `extends:` composition, `vars_files`, `-e` extra vars.

`load_playbook` returns the merged data exactly as written (no defaults filled in) together with
the position of every key and the validated `PlaybookModel`. Every problem is one `InputError`
that points at the file, line and column to fix.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config.fields import FieldProblem, bare_boolean, validate_vars
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.merge import Layer, copy_positions, merge_layers, reroot
from orchestrator.config.model import playbook_json_schema
from orchestrator.config.templates.render import TemplateEngine, VarDecl, VariableScope
from orchestrator.config.validation import validate_playbook_data
from orchestrator.config.values import (
    describe,
    describe_document,
    is_template,
    shown,
    suggest,
)
from orchestrator.config.yamlpos import YamlDocument, load_yaml, parse_yaml
from orchestrator.errors import InputError, SourceLocation, note_secret_values
from orchestrator.runner.redaction import is_secret_name, tainted_secret_names

__all__ = [
    "EXTRA_VARS_SOURCE",
    "is_secret_name",
    "load_playbook",
    "note_secrets_in",
    "parse_extra_vars",
    "playbook_json_schema",
    "suggest_file",
]

EXTRA_VARS_SOURCE = "<extra vars>"


# --------------------------------------------------------------------------------------------
# Loading: extends, vars_files, extra vars


def _err(message: str, doc: YamlDocument, path: KeyPath, *, hint: str | None = None) -> InputError:
    return InputError(
        message,
        location=doc.locate(path, value=True),
        key_path=format_key_path(path) or None,
        hint=hint,
    )


def _refuse_word_booleans_in_matrix(doc: YamlDocument) -> None:
    """`spec: [off, eagle3]`: a matrix value YAML read as a boolean from yes/no/on/off.

    Refused as env refuses booleans (same words), while `true`/`false` stay deliberate booleans.
    """

    def reading_order(path: KeyPath) -> tuple[int, int]:
        where = doc.locate(path, value=True)
        return (where.line or 0, where.col or 0)

    for path in sorted(filter(_is_matrix_value, doc.word_booleans), key=reading_order):
        problem = bare_boolean(_value_at(doc.data, path), "a matrix value")
        raise _err(problem.message, doc, path, hint=problem.hint)


def _is_matrix_value(path: KeyPath) -> bool:
    """An axis value (`matrix.spec[0]`) or a point's value (`matrix.include[0].spec`)."""
    if len(path) == 3 and path[0] == "matrix":
        return path[1] not in ("zip", "include", "exclude", "where") and isinstance(path[2], int)
    return len(path) == 4 and path[0] == "matrix" and path[1] in ("include", "exclude")


def _value_at(data: Any, path: KeyPath) -> Any:
    for part in path:
        data = data[part]
    return data


def _relative(base_file: Path, ref: str) -> Path:
    return Path(os.path.normpath(base_file.parent / os.path.expanduser(ref)))


class _Loader:
    def __init__(self, extra_vars: Mapping[str, Any] | None = None) -> None:
        self.files: list[Path] = []
        self.extra_vars = dict(extra_vars or {})

    def _record(self, path: Path) -> None:
        if path not in self.files:
            self.files.append(path)

    def load(self, path: Path, chain: tuple[Path, ...]) -> Layer:
        doc = load_yaml(path, what="playbook")
        self._record(path)
        if not isinstance(doc.data, dict):
            raise InputError(
                "a playbook is a mapping of keys (name, matrix, server, ...), "
                f"got {describe_document(doc.data)}",
                location=doc.locate((), value=True),
            )
        _refuse_word_booleans_in_matrix(doc)
        own = self._own(doc)
        merged: Layer | None = None
        for ref, at in self._extends(doc):
            target = _relative(path, ref)
            key = target.resolve()
            if key in chain:  # `chain`: resolved paths of the files extending each other
                cycle = [p.name for p in chain[chain.index(key) :]] + [target.name]
                raise _err(
                    "cycle: " + " -> ".join(cycle),
                    doc,
                    at,
                    hint="a playbook cannot extend itself, directly or through others",
                )
            if not target.is_file():
                raise _err(
                    f"file not found: {ref} (looked for {target})",
                    doc,
                    at,
                    hint=suggest_file(target),
                )
            base = self.load(target, (*chain, key))
            merged = base if merged is None else merge_layers(merged, base)
        if merged is None:
            return own
        result = merge_layers(merged, own)
        result.positions[()] = own.positions[()]
        return result

    def _extends(self, doc: YamlDocument) -> list[tuple[str, KeyPath]]:
        value = doc.data.get("extends")
        if value is None:
            return []
        refs: list[tuple[str, KeyPath]] = []
        if isinstance(value, str):
            refs.append((value, ("extends",)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise _err(f"expected a file name, got {describe(item)}", doc, ("extends", i))
                refs.append((item, ("extends", i)))
        else:
            raise _err(
                f"expected a file name or a list of them, got {describe(value)}",
                doc,
                ("extends",),
            )
        for ref, at in refs:
            if is_template(ref):
                raise _err("extends cannot be a template: it is read before rendering", doc, at)
        return refs

    def _own(self, doc: YamlDocument) -> Layer:
        """This file's data with `extends` dropped and its `vars_files` merged into `vars`."""
        data = {k: v for k, v in doc.data.items() if k not in ("extends", "vars_files")}
        src = Layer(data)
        copy_positions(
            Layer(doc.data, dict(doc.positions), dict(doc.value_positions)), data, (), src
        )
        files = doc.data.get("vars_files")
        if files is None:
            return src
        if not isinstance(files, list):
            raise _err(
                f"expected a list of file names, got {describe(files)}", doc, ("vars_files",)
            )
        if "vars" in data and data["vars"] is not None and not isinstance(data["vars"], dict):
            raise _err(
                f"expected a mapping of names to values, got {describe(data['vars'])}",
                doc,
                ("vars",),
            )
        earlier: dict[str, tuple[Any, YamlDocument]] = {}  # vars of the files read so far
        for i, ref in enumerate(files):
            if not isinstance(ref, str):
                raise _err(f"expected a file name, got {describe(ref)}", doc, ("vars_files", i))
            if is_template(ref):
                ref = self._render_vars_file_name(ref, doc, data.get("vars"), i, earlier)
            target = _relative(doc.path, ref)
            if not target.is_file():
                raise _err(
                    f"vars file not found: {ref} (looked for {target})",
                    doc,
                    ("vars_files", i),
                    hint=suggest_file(target),
                )
            vdoc = load_yaml(target, allow_empty=True, what="vars file")
            self._record(target)
            if vdoc.data is None:
                continue
            if not isinstance(vdoc.data, dict):
                raise InputError(
                    "a vars file is a mapping of names to values, "
                    f"got {describe_document(vdoc.data)}",
                    location=vdoc.locate((), value=True),
                )
            layer = reroot(
                Layer(vdoc.data, dict(vdoc.positions), dict(vdoc.value_positions)), ("vars",)
            )
            src = merge_layers(src, layer, levels=2)  # a var from a vars file replaces it whole
            earlier.update((str(k), (v, vdoc)) for k, v in vdoc.data.items())
        return src

    def _render_vars_file_name(
        self,
        ref: str,
        doc: YamlDocument,
        own_vars: Any,
        index: int,
        earlier: Mapping[str, tuple[Any, YamlDocument]],
    ) -> str:
        """`vars/{{ cluster }}.yml` as Ansible templates it: with -e vars, the vars of the files
        listed before it, and this file's `vars:` (that precedence, highest first).

        Inventory and matrix variables do not exist yet: the file is read before any host.
        """

        def locate(path: KeyPath) -> SourceLocation:
            return doc.locate(path, value=True)

        def in_vars_file(source: YamlDocument) -> Callable[[KeyPath], SourceLocation]:
            # its variables sit at the file's top level: ("vars", name) there is (name,)
            return lambda path: source.locate(path[1:], value=True)

        decls = {
            str(name): VarDecl(value, ("vars", name), locate)
            for name, value in (own_vars or {}).items()
        }
        for name, (value, vdoc) in earlier.items():
            decls[name] = VarDecl(value, ("vars", name), in_vars_file(vdoc))

        engine = TemplateEngine()
        scope = VariableScope(engine, {**engine.globals, **self.extra_vars}, decls)
        path: KeyPath = ("vars_files", index)
        try:
            rendered = engine.render_text(ref, scope, path, locate)
        except InputError as exc:
            if exc.message.startswith("undefined variable"):
                # Jinja's globals are no likely meant names here; the variables in reach are.
                name = exc.message.split("'")[1] if "'" in exc.message else ""
                close = suggest(name, [*decls, *self.extra_vars])
                exc.hint = (f"{close}; " if close else "") + (
                    "vars_files see -e vars, earlier vars files and this file's vars: only; "
                    "the inventory and the matrix come later"
                )
            raise
        if not isinstance(rendered, str) or not rendered:
            raise _err(
                f"a vars file name must render to a non-empty string, got {describe(rendered)}",
                doc,
                path,
            )
        return rendered


def suggest_file(target: Path) -> str | None:
    """`did you mean 'base.yaml'?` for a near file name in the same folder."""
    try:
        names = [p.name for p in target.parent.iterdir() if p.is_file()]
    except OSError:
        return None
    # Stricter than for keys: folders hold many similar names (`*.yml`), most unrelated.
    close = difflib.get_close_matches(target.name, names, n=1, cutoff=0.8)
    return f"did you mean {close[0]!r}?" if close else None


def note_secrets_in(data: Any, declared: Sequence[str] = ()) -> None:
    """Note (errors.note_secret_values) every scalar under a secret name in `data`: a name that
    looks secret, one in `declared`, or a variable a secret's template reads. Messages then
    name the key and never show the value (`ready.timeout: "{{ hf_token }}"`)."""
    names = {*declared, *tainted_secret_names([data], declared)}
    found: list[Any] = []

    def scalars(node: Any, depth: int) -> None:
        if depth > 100:
            return
        if isinstance(node, Mapping):
            for value in node.values():
                scalars(value, depth + 1)
        elif isinstance(node, list | tuple):
            for item in node:
                scalars(item, depth + 1)
        elif not is_template(node):  # `{{ hf_token }}` names a secret; it is none itself
            found.append(node)

    def walk(node: Any, depth: int) -> None:
        if depth > 100:
            return
        if isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(key, str) and key != "secrets" and is_secret_name(key, names):
                    scalars(value, depth + 1)
                walk(value, depth + 1)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item, depth + 1)

    walk(data, 0)
    note_secret_values(found)


def load_playbook(path: Path, extra_vars: Mapping[str, Any] | None = None) -> LoadedPlaybook:
    """Read a playbook, resolve `extends:`, merge `vars_files` and `-e` vars, check its shape.

    Bases merge deeply (mappings key by key, lists replaced, the extending file wins);
    a file's `vars_files` replace its own vars of the same name; extra vars replace any var.
    """
    loader = _Loader(extra_vars)
    merged = loader.load(path, (path.resolve(),))
    if extra_vars:
        layer = Layer({"vars": dict(extra_vars)})
        for name in extra_vars:
            layer.positions[("vars", name)] = SourceLocation(EXTRA_VARS_SOURCE)
        base_positions = merged.positions[()]
        merged = merge_layers(merged, layer, levels=2)
        merged.positions[()] = base_positions
    declared = merged.data.get("secrets")
    note_secrets_in(merged.data, [str(n) for n in declared] if isinstance(declared, list) else [])
    model = validate_playbook_data(merged.data, merged.positions, str(path), merged.value_positions)
    return LoadedPlaybook(
        path=path,
        data=merged.data,
        model=model,
        files=tuple(loader.files),
        positions=merged.positions,
        extra_vars=dict(extra_vars or {}),
    )


def parse_extra_vars(items: Sequence[str]) -> dict[str, Any]:
    """Ansible's `-e` forms: `k=v [k2=v2 ...]` (strings), `@file.yml|json`, inline `{...}`.

    Later items win over earlier ones. Errors name the offending argument.
    """
    result: dict[str, Any] = {}
    for item in items:
        result.update(_parse_extra_item(item))
    return result


_ASSIGNED_NAME = re.compile(r"""([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[=:]""")


def _shown_extra_item(item: str) -> str:
    """An `-e` argument as a message may quote it: from the first secret name on, hidden
    (`hf_token=X junk` -> `hf_token=***`; where a value ends is unknown in a broken argument)."""
    if item.strip().startswith("@"):
        return item  # a file name; the file holds the values
    for match in _ASSIGNED_NAME.finditer(item):
        if is_secret_name(match.group(1)):
            return item[: match.end()] + "***"
    return item


def _first_secret_assignment(tokens: Sequence[str]) -> int | None:
    """The index of the first `name=value` word whose name is secret, or None."""
    for i, token in enumerate(tokens):
        name, sep, _ = token.partition("=")
        if sep and is_secret_name(name):
            return i
    return None


_STRUCTURED_VALUE = re.compile(r"(?:^|\s)([^\s=]+)=[\[{]")


def _refuse_structured_value(text: str, label: str) -> None:
    """`-e 'nccl={"default": {}}'`: name=value gives strings only, and the shell words of a
    mapping split it apart; the Ansible way is the whole mapping as JSON. A quoted value
    (`-e 'x="{literal}"'`) stays the string it says it is."""
    match = _STRUCTURED_VALUE.search(text)
    if match is None:
        return
    name = match.group(1)
    value_text = text[match.end(0) - 1 :].strip()
    example = f'{{"{name}": {value_text[0]}...{"}" if value_text[0] == "{" else "]"}}}'
    try:
        value = parse_yaml(value_text, "<-e>").data
    except InputError:
        value = None
    if is_secret_name(name):
        example = f'{{"{name}": "<secret>"}}'  # a secret's value is never echoed
    elif value is not None and match.start(1) == 0:  # one name=value: the exact JSON to write
        example = json.dumps({name: value}, default=str)
    kind = "list" if value_text.startswith("[") else "mapping"
    raise InputError(
        f"{label}: the value of {name!r} is a {kind}, but name=value gives only strings",
        hint=f"pass the whole mapping as JSON: -e '{example}'",
    )


def _parse_extra_item(item: str) -> dict[str, Any]:
    text = item.strip()
    label = f"-e {_shown_extra_item(item)!r}"
    if not text:
        raise InputError(f"{label}: empty extra vars", hint="write -e name=value")
    data: Any
    doc: YamlDocument | None = None
    if text.startswith("@"):
        path = Path(os.path.expanduser(text[1:]))
        doc = load_yaml(path, allow_empty=True, what="extra vars file")
        data = {} if doc.data is None else doc.data
        if not isinstance(data, dict):
            raise InputError(
                f"{label}: an extra vars file must hold a mapping, got {describe_document(data)}",
                location=doc.locate((), value=True),
            )
    elif text[0] in "/.":
        raise InputError(f"{label}: not name=value", hint=f"to read a file write -e @{text}")
    elif text[0] in "{[":
        try:
            data = parse_yaml(text, "<-e>").data
        except InputError as exc:
            raise InputError(f"{label}: {exc.message}", hint=exc.hint) from None
        if not isinstance(data, dict):
            raise InputError(f"{label}: extra vars must be a mapping, got {describe(data)}")
    else:
        _refuse_structured_value(text, label)
        try:
            tokens = shlex.split(text)
        except ValueError as exc:
            raise InputError(f"{label}: {exc}", hint="check the quotes") from None
        data = {}
        secret_at = _first_secret_assignment(tokens)
        for i, token in enumerate(tokens):
            name, sep, value = token.partition("=")
            if not sep:
                if secret_at is not None and i > secret_at:
                    # maybe the rest of the secret's value (unquoted spaces): never echoed
                    secret = tokens[secret_at].partition("=")[0]
                    raise InputError(
                        f"{label}: a word after {secret}= is not name=value",
                        hint=f"""quote a value that holds spaces: -e '{secret}="two words"'""",
                    )
                key, colon, rest = text.partition(":")
                secret_key = is_secret_name(key.strip())
                word = "a word" if secret_key else shown(token, "a word")
                hint = f"write -e {key.strip() if secret_key else token}=VALUE"
                if colon and key.strip() and "=" not in text:  # YAML's `name: value`
                    value_text = "VALUE" if secret_key else rest.strip() or "VALUE"
                    mapping = f"{key.strip()}: {value_text}" if secret_key else text.strip()
                    hint = f"write -e {key.strip()}={value_text}, or a mapping: -e '{{{mapping}}}'"
                raise InputError(f"{label}: {word} is not name=value", hint=hint)
            data[name] = value
    for name in data:
        try:
            validate_vars({name: None})
        except FieldProblem as problem:
            raise InputError(
                f"{label}: {problem.message}",
                location=doc.locate((name,)) if doc is not None else None,
                key_path=format_key_path((name,)) if doc is not None else None,
                hint=problem.hint,
            ) from None
    return dict(data)
