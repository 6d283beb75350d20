"""The ways of reaching a host: the interface (`base`), how a host's kind picks one
(`connect`), and the transports (`local`, `ssh`, `slurm`)."""
