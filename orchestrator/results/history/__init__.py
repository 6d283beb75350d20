"""The results history: an index of bundles in SQLite, rebuildable from the bundles."""
