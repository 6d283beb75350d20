"""Sandboxed, native-typed Jinja2 rendering of playbook data, its limits and its errors."""
