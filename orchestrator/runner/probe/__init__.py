"""The snapshot probe (host side, Python 3.8, stdlib only): gather.py runs it, shape.py
declares what it writes."""
