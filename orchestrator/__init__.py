"""orch: a declarative experiment orchestrator for GPU serving benchmarks."""

__version__ = "0.1.0"
