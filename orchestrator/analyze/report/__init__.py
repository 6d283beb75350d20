"""`orch report`: tables (tables.py) and one self-contained HTML file (html.py)."""
