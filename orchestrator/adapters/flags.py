"""Flag mappings to argv: how `args:` becomes command-line flags, the same for every adapter."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from orchestrator.errors import InputError

ListStyle = Literal["nargs", "repeat", "csv", "json"]


def normalize_flag(key: str) -> str:
    """`tp_size`, `tp-size` and `--tp-size` all name the flag `tp-size`."""
    return key.strip().lstrip("-").replace("_", "-")


def scalar_text(value: Any) -> str:
    """A scalar as a command line writes it (booleans as `true`/`false`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def normalize_args(args: Mapping[str, Any], key_path: str = "args") -> dict[str, Any]:
    """The flag mapping with normalized keys; two spellings of one flag are an error."""
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for key, value in args.items():
        flag = normalize_flag(str(key))
        if not flag:
            raise InputError("empty flag name", key_path=f"{key_path}.{key}")
        if flag in out:
            raise InputError(
                f"{key!r} and {origin[flag]!r} are the same flag --{flag}",
                key_path=f"{key_path}.{key}",
            )
        out[flag] = value
        origin[flag] = str(key)
    return out


def flags_to_argv(
    args: Mapping[str, Any],
    *,
    list_styles: Mapping[str, ListStyle] | None = None,
    key_path: str = "args",
) -> list[str]:
    """A flag mapping as argv, in the mapping's order.

    True -> `--flag`; False/None -> dropped; dict -> one JSON argument; list -> `--flag a b`
    (argparse nargs, what SGLang and vLLM list flags take) unless `list_styles` names another
    style for that flag: `repeat` (`--flag a --flag b`), `csv` (`--flag a,b`) or `json`.
    Keys must already be normalized (see `normalize_args`).
    """
    styles = list_styles or {}
    argv: list[str] = []
    for flag, value in args.items():
        kp = f"{key_path}.{flag}"
        opt = f"--{flag}"
        if value is None or value is False:
            continue
        if value is True:
            argv.append(opt)
        elif isinstance(value, Mapping):
            argv += [opt, _json_text(value)]
        elif isinstance(value, list | tuple):
            if not value:
                raise InputError(
                    f"empty list for {opt}", key_path=kp, hint="use null to leave the flag out"
                )
            style = styles.get(flag, "nargs")
            if style == "json":
                argv += [opt, _json_text(list(value))]
                continue
            items: list[str] = []
            for i, item in enumerate(value):
                if isinstance(item, list | tuple) or item is None:
                    raise InputError(
                        "nested lists and nulls are not flag values", key_path=f"{kp}[{i}]"
                    )
                items.append(_json_text(item) if isinstance(item, Mapping) else scalar_text(item))
            if style == "repeat":
                for item_text in items:
                    argv += [opt, item_text]
            elif style == "csv":
                argv += [opt, ",".join(items)]
            else:
                argv += [opt, *items]
        else:
            argv += [opt, scalar_text(value)]
    return argv
