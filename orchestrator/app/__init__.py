"""What orch does, callable from Python without the CLI: load a `Plan`, then run it (apply)."""
