"""`orch diff`: what differs between two cells, found (cells.py, host.py), as data
(model.py), printed (render.py)."""
