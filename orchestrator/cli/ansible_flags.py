"""ansible-playbook's flags, answered with what orch does instead (an Ansible user types them)."""

from __future__ import annotations

_NEVER_ESCALATES = (
    "not needed: orch never escalates (it runs as the inventory's ansible_user, in its workdir)"
)

# flag -> what to use in orch; only flags no orch command defines reach this table
INSTEAD: dict[str, str] = {
    "--check": "orch's dry run is `orch plan PLAYBOOK` (every cell; -v shows the commands)",
    "-C": "orch's dry run is `orch plan PLAYBOOK` (every cell; -v shows the commands)",
    "--diff": "`orch plan PLAYBOOK -v` shows what would run; `orch diff A B` compares two runs",
    "-D": "`orch plan PLAYBOOK -v` shows what would run; `orch diff A B` compares two runs",
    "--syntax-check": "use `orch validate PLAYBOOK` (load, check and render; nothing runs)",
    "--list-hosts": "use `orch plan PLAYBOOK` (the cells and their hosts; --limit narrows)",
    "--list-tasks": "use `orch plan PLAYBOOK -v` (each cell's commands)",
    "--become": _NEVER_ESCALATES,
    "-b": _NEVER_ESCALATES,
    "--become-user": _NEVER_ESCALATES,
    "--become-method": _NEVER_ESCALATES,
    "--ask-become-pass": _NEVER_ESCALATES,
    "-K": _NEVER_ESCALATES,
    "--forks": "use --max-parallel N (hosts at once)",
    "-f": "use --max-parallel N (hosts at once)",
    "--user": "set ansible_user for the host in the inventory (orch reads it)",
    "-u": "set ansible_user for the host in the inventory (orch reads it)",
    "--private-key": "set ansible_ssh_private_key_file in the inventory (orch reads it)",
    "--key-file": "set ansible_ssh_private_key_file in the inventory (orch reads it)",
    "--ask-pass": "orch logs in with SSH keys or the agent, never a typed password",
    "-k": "orch logs in with SSH keys or the agent, never a typed password",
    "--tags": "pick cells with --cells 'axis=value,...' (globs and != too)",
    "-t": "pick cells with --cells 'axis=value,...' (globs and != too)",
    "--skip-tags": "leave cells out with --cells 'axis!=value'",
    "--start-at-task": "use --cells to pick cells, or --resume RUN to go on where a run stopped",
    "--step": "use `orch plan PLAYBOOK` first, then --cells to run a few",
}


def instead(flag: str | None) -> str | None:
    """`--check is ansible-playbook's; ...` for an Ansible flag orch lacks, else None."""
    if flag is None:
        return None
    name = flag.split("=", 1)[0]
    answer = INSTEAD.get(name)
    return None if answer is None else f"{name} is ansible-playbook's; {answer}"
