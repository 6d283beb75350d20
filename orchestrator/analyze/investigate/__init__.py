"""`orch investigate`'s reasoning: factors, experiments and verdicts, on recorded data."""
