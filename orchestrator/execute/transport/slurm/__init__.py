"""The Slurm transport: every command a Slurm job on a login host (`connection`), a multi-node
cell's job of N tasks (`tasks`), and a resume meeting a dead controller's jobs (`settle`)."""
