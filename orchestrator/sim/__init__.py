"""A simulated SGLang-shaped GPU serving host: server, bench client and demo repo.

Public API (imported lazily so worker processes start fast):
`orchestrator.sim.repo.init_repo`, `orchestrator.sim.smi.install_fake_nvidia_smi`,
`orchestrator.sim.state.write_host_state`, `orchestrator.sim.model` (the performance model).
"""
