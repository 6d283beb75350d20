"""Ansible inventories: sources, INI and YAML formats, the group graph, connection variables."""
