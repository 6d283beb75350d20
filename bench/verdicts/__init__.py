"""One module per verdict family; each exposes `rows(seed, quick)` for bench/verdict_accuracy.py."""
