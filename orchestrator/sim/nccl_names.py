"""The environment variables NCCL documents, and the nearest one to a misspelled name.

Data only, standard library only: the simulated NCCL (`sim/worker.py`) reports just these names
at init, as real NCCL ignores a variable it does not know, and `orch validate` can warn on an
`NCCL_*` name that is not one of them. Taken from the "Environment Variables" page of NCCL's
user guide (2.4 to 2.27, deprecated names kept, since older builds still read them).
"""

from __future__ import annotations

import difflib

NCCL_ENV_NAMES: frozenset[str] = frozenset(
    {
        # System configuration: sockets, bootstrap, InfiniBand/RoCE, network plugins.
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_SOCKET_RETRY_CNT",
        "NCCL_SOCKET_RETRY_SLEEP_MSEC",
        "NCCL_SOCKET_POLL_TIMEOUT_MSEC",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_CROSS_NIC",
        "NCCL_IB_HCA",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_ADDR_FAMILY",
        "NCCL_IB_ADDR_RANGE",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_SL",
        "NCCL_IB_TC",
        "NCCL_IB_FIFO_TC",
        "NCCL_IB_RETURN_ASYNC_EVENTS",
        "NCCL_IB_PKEY",
        "NCCL_IB_USE_INLINE",
        "NCCL_IB_MERGE_NICS",
        "NCCL_IB_MERGE_VFS",
        "NCCL_IB_ECE_ENABLE",
        "NCCL_OOB_NET_ENABLE",
        "NCCL_OOB_NET_IFNAME",
        "NCCL_UID_STAGGER_THRESHOLD",
        "NCCL_UID_STAGGER_RATE",
        "NCCL_NET",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_ENV_PLUGIN",
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_CONF_FILE",
        "NCCL_HOSTID",
        "NCCL_DEBUG",
        "NCCL_DEBUG_FILE",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_COLLNET_ENABLE",
        "NCCL_COLLNET_NODE_THRESHOLD",
        "NCCL_CTA_POLICY",
        "NCCL_TOPO_FILE",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_SET_THREAD_NAME",
        "NCCL_RAS_ENABLE",
        "NCCL_RAS_ADDR",
        "NCCL_RAS_TIMEOUT_FACTOR",
        "NCCL_MNNVL_ENABLE",
        "NCCL_MNNVL_UUID",
        "NCCL_MNNVL_CLIQUE_ID",
        "NCCL_NVLS_ENABLE",
        "NCCL_NVLS_CHUNKSIZE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_CUMEM_HOST_ENABLE",
        "NCCL_WIN_ENABLE",
        # Debugging and tuning (NCCL advises against keeping these set in production).
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_P2P_DIRECT_DISABLE",
        "NCCL_P2P_USE_CUDA_MEMCPY",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE",
        "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_LL_THRESHOLD",
        "NCCL_P2P_PXN_LEVEL",
        "NCCL_SHM_DISABLE",
        "NCCL_SHM_USE_CUDA_MEMCPY",
        "NCCL_SHM_MEMCPY_MODE",
        "NCCL_SHM_LOCALITY",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NRINGS",
        "NCCL_MIN_NRINGS",
        "NCCL_RINGS",
        "NCCL_MAX_CTAS",
        "NCCL_MIN_CTAS",
        "NCCL_MIN_P2P_NCHANNELS",
        "NCCL_MAX_P2P_NCHANNELS",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_CGA_CLUSTER_SIZE",
        "NCCL_CHECKS_DISABLE",
        "NCCL_CHECK_POINTERS",
        "NCCL_LAUNCH_MODE",
        "NCCL_LAUNCH_ORDER_IMPLICIT",
        "NCCL_IB_DISABLE",
        "NCCL_IB_AR_THRESHOLD",
        "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_IB_SPLIT_DATA_ON_QPS",
        "NCCL_IB_CUDA_SUPPORT",
        "NCCL_IB_PCI_RELAXED_ORDERING",
        "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_GDR_LEVEL",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_C2C",
        "NCCL_NET_GDR_READ",
        "NCCL_NET_SHARED_BUFFERS",
        "NCCL_NET_SHARED_COMMS",
        "NCCL_NET_DISABLE_INTRA",
        "NCCL_NET_FORCE_FLUSH",
        "NCCL_NET_MERGE_LEVEL",
        "NCCL_SINGLE_RING_THRESHOLD",
        "NCCL_LL_THRESHOLD",
        "NCCL_TREE_THRESHOLD",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_NVB_DISABLE",
        "NCCL_NVB_PRECONNECT",
        "NCCL_PXN_DISABLE",
        "NCCL_PXN_C2C",
        "NCCL_RUNTIME_CONNECT",
        "NCCL_GRAPH_REGISTER",
        "NCCL_LOCAL_REGISTER",
        "NCCL_LEGACY_CUDA_REGISTER",
        "NCCL_SET_STACK_SIZE",
        "NCCL_GRAPH_MIXING_SUPPORT",
        "NCCL_DMABUF_ENABLE",
        "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
        "NCCL_COMM_BLOCKING",
        "NCCL_MEM_SYNC_DOMAIN",
        "NCCL_NVLS_TREE_MAX_CHUNKSIZE",
        "NCCL_WORK_FIFO_DEPTH",
        "NCCL_WORK_FIFO_BYTES",
        "NCCL_GDRCOPY_ENABLE",
        "NCCL_GDRCOPY_FLUSH_ENABLE",
        "NCCL_GDRCOPY_SYNC_ENABLE",
        "NCCL_PROXY_APPEND_BATCH_SIZE",
        "NCCL_CREATE_THREAD_CONTEXT",
    }
)


def is_nccl_name(name: str) -> bool:
    """True when `name` is one of the environment variables NCCL documents."""
    return name in NCCL_ENV_NAMES


def nearest_nccl_name(name: str) -> str | None:
    """The documented NCCL variable closest to `name` (a likely misspelling), or None.

    None for a known name (nothing to suggest) and for one too far from every known name.
    """
    if name in NCCL_ENV_NAMES:
        return None
    found = difflib.get_close_matches(name.upper(), sorted(NCCL_ENV_NAMES), n=1, cutoff=0.8)
    return found[0] if found else None
