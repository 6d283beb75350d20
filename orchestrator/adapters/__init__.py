"""Adapters: how a serving engine or benchmark client becomes argv, readiness and metrics."""
