"""Secrets on the controller side: the name rule and its lengths (rule.py, the runner's own
rule re-exported), every source of secret values (values.py), and redaction of text, JSON trees,
YAML files and command lines (redact.py). The process's registry of values never to print in a
message is `errors.KNOWN_SECRETS` (the lowest layer: every error message hides them)."""
