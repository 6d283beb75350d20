"""The apply engine: a run's host queues, the stream of runner lines, the run record."""
