"""Which interpreter a server runs under, so snapshots record the engine's packages, not the
runner's: argv[0] when it is a Python, else what a console script's first line names."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orchestrator.runner.snapshot import python_of


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_python_argv0_is_the_interpreter() -> None:
    assert python_of(["/venv/bin/python3.11", "-m", "sglang.launch_server"]) == (
        "/venv/bin/python3.11"
    )
    assert python_of(["python", "-m", "x"]) == "python"


def test_a_console_script_on_path_names_its_venvs_python(tmp_path: Path) -> None:
    venv_python = str(tmp_path / "venv" / "bin" / "python")
    _script(tmp_path / "venv" / "bin" / "vllm", f"#!{venv_python}\nimport sys\n")
    path = f"/nonexistent:{tmp_path / 'venv' / 'bin'}"
    assert python_of(["vllm", "serve", "/m"], path) == venv_python
    assert python_of([str(tmp_path / "venv" / "bin" / "vllm"), "serve"]) == venv_python


def test_env_shebangs_are_looked_up_on_the_servers_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    real = _script(bin_dir / "python3", "#!/bin/sh\n")
    launcher = _script(tmp_path / "tools" / "serve", "#!/usr/bin/env -S python3 -u\nx = 1\n")
    assert python_of([str(launcher)], str(bin_dir)) == str(real)


def test_pips_long_path_form_is_read(tmp_path: Path) -> None:
    long_python = "/" + "/".join(["very-long-directory"] * 8) + "/bin/python"
    launcher = _script(
        tmp_path / "bin" / "vllm",
        f"#!/bin/sh\n'''exec' \"{long_python}\" \"$0\" \"$@\"\n' '''\nimport sys\n",
    )
    assert python_of([str(launcher), "serve"]) == long_python


def test_what_names_no_python_gives_none(tmp_path: Path) -> None:
    shell = _script(tmp_path / "run.sh", "#!/bin/bash\nexec server\n")
    binary = tmp_path / "engine"
    binary.write_bytes(b"\x7fELF\x02\x01")
    assert python_of([str(shell)]) is None
    assert python_of([str(binary)]) is None
    assert python_of(["no-such-program-anywhere"], os.defpath) is None
    assert python_of([]) is None
