"""One exception family for everything orch reports to a person.

Every error carries what a tired person needs to fix it: where (file:line:col), which key
(a dotted path), what is wrong and, when we can guess it, the likely fix. The CLI is the only
place that turns these into messages and exit codes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILED = 1  # a cell failed or an expectation was missed
EXIT_BAD_INPUT = 2  # nothing ran
EXIT_REGRESSION = 4  # `orch apply --track`: the run starts a regression in its history

SECRET_SHOWN = "***REDACTED***"  # the runner's REDACTED: this layer sits below it
# Shorter values are hidden in messages only where a message shows a whole value (`describe`):
# replaced inside text they would shred it (the runner's MIN_SECRET_LENGTH, the same rule).
SECRET_TEXT_MIN = 8


class KnownSecrets:
    """Values this process must never print: every error message hides them.

    The loaders note each value they read under a secret name (and each variable a secret's
    template reads) before anything can quote it; `OrchError.render` hides them.
    """

    def __init__(self) -> None:
        self._values: set[str] = set()

    def note(self, values: Iterable[object]) -> None:
        """Remember these values (numbers as their text; blanks and booleans are no secret)."""
        for value in values:
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                text = str(value)
                if text.strip():
                    self._values.add(text)

    def forget(self) -> None:
        """Forget every value: a long-lived caller (or a test) starting afresh."""
        self._values.clear()

    def holds(self, text: str) -> bool:
        """True when `text` is a noted value or holds one (long enough to find in text)."""
        if text in self._values:
            return True
        return any(len(v) >= SECRET_TEXT_MIN and v in text for v in self._values)

    def hide(self, text: str) -> str:
        """`text` with every noted value (long enough to find in text) as ***REDACTED***."""
        for value in sorted(self._values, key=len, reverse=True):
            if len(value) >= SECRET_TEXT_MIN and value in text:
                text = text.replace(value, SECRET_SHOWN)
        return text


KNOWN_SECRETS = KnownSecrets()  # one process, one set of values it has read


def note_secret_values(values: Iterable[object]) -> None:
    """`KNOWN_SECRETS.note`: the loaders' way in."""
    KNOWN_SECRETS.note(values)


def is_known_secret(text: str) -> bool:
    """`KNOWN_SECRETS.holds`: whether a message may quote `text`."""
    return KNOWN_SECRETS.holds(text)


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
        return KNOWN_SECRETS.hide(text)  # a message quotes values; a secret it never shows

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


class ResultsWriteError(OrchError):
    """The results folder cannot be written: permission denied, read-only, full.

    Exit 2 when found before anything ran (`before_run`), else 1: cells ran, and what they
    left that was not recorded is named with the way to collect it (`--resume`).
    """

    def __init__(self, message: str, *, before_run: bool, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = EXIT_BAD_INPUT if before_run else EXIT_FAILED
