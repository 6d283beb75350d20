"""Connections, the controller, and shipping the runner (`orchestrator.runner`) to hosts."""
