"""One exception family for everything orch reports to a person.

Every error carries what a tired person needs to fix it: where (file:line:col), which key
(a dotted path), what is wrong and, when we can guess it, the likely fix. The CLI is the only
place that turns these into messages and exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILED = 1  # a cell failed or an expectation was missed
EXIT_BAD_INPUT = 2  # nothing ran


@dataclass(frozen=True)
class SourceLocation:
    """A position in a file a user wrote; line and col are 1-based."""

    file: str
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)


class OrchError(Exception):
    """Base of every error orch reports; `exit_code` is what the CLI exits with."""

    exit_code: int = EXIT_FAILED

    def __init__(
        self,
        message: str,
        *,
        location: SourceLocation | None = None,
        key_path: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.key_path = key_path
        self.hint = hint

    def render(self) -> str:
        """`file:line:col: key.path: message (hint)` with the parts that are known."""
        prefix = ""
        if self.location is not None:
            prefix += f"{self.location}: "
        if self.key_path:
            prefix += f"{self.key_path}: "
        text = prefix + self.message
        if self.hint:
            text += f" ({self.hint})"
        return text

    def __str__(self) -> str:
        return self.render()


class InputError(OrchError):
    """Bad input: a playbook, inventory, variable or argument. Nothing was run."""

    exit_code = EXIT_BAD_INPUT


class ConnectionFailure(OrchError):
    """A host could not be reached or authenticated (retried before it is raised)."""


class HostKeyError(ConnectionFailure):
    """A host's key is unknown or changed: refused, never retried."""


class ExecutionError(OrchError):
    """Something went wrong while running on a host, outside any one cell's own failure."""


class BundleError(OrchError):
    """A result bundle is missing, unreadable, incomplete or fails its manifest."""

    exit_code = EXIT_BAD_INPUT
