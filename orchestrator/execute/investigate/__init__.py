"""`orch investigate`: controlled experiments from GOOD and BAD to a cause."""
