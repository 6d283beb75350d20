"""`orch audit`: the verdicts (verdicts.py) and the re-runs and probes behind them (run.py)."""
