"""Connections, the controller, and the runner and probe shipped to hosts."""
