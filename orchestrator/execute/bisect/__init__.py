"""`orch bisect`: the search over commits (search.py) and the runs that measure it (run.py)."""
