"""Result bundles: writing, reading, manifests, snapshots and redaction."""
