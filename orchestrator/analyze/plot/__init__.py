"""`orch report --plot`: metric charts (charts.py) and sweep panels (sweep.py); needs matplotlib."""
