"""One secret rule, however many layers need it: the lengths the controller uses are the
runner's (or named beside them), and the process's registry hides what it was told."""

from __future__ import annotations

from orchestrator import cell_ids, errors
from orchestrator.runner import redaction
from orchestrator.secrets import rule


def test_every_layer_uses_the_runners_lengths() -> None:
    assert rule.MIN_SECRET_LENGTH == redaction.MIN_SECRET_LENGTH
    # errors.py sits below the runner and cannot import it: the same number, checked here
    assert errors.SECRET_TEXT_MIN == rule.MIN_SECRET_LENGTH
    assert errors.SECRET_SHOWN == rule.REDACTED
    # a cell id's masks replace substrings as short as the controller's by-value floor
    assert cell_ids.MIN_MASKED_SUBSTRING == rule.MIN_VALUE_LENGTH


def test_the_registry_hides_long_values_inside_text_and_short_ones_only_whole() -> None:
    known = errors.KnownSecrets()
    known.note(["hf_abcdefgh", "xy7", 12345678, True, "  "])
    assert known.hide("token hf_abcdefgh here") == "token ***REDACTED*** here"
    assert known.hide("xy7 stays inside text") == "xy7 stays inside text"
    assert known.holds("xy7") and known.holds("12345678") and not known.holds("True")
    known.forget()
    assert not known.holds("hf_abcdefgh")


def test_an_error_message_never_shows_a_noted_value() -> None:
    errors.note_secret_values(["s3cr3t-value-99"])
    err = errors.InputError("bad value 's3cr3t-value-99'", key_path="env.API_KEY")
    assert "s3cr3t-value-99" not in str(err) and "***REDACTED***" in str(err)
