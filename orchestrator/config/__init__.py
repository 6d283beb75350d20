"""What users write: YAML with positions, inventories, host patterns and the playbook model."""
