"""What this project knows about NCCL's environment variables, in one table.

The NCCL lint (nccl_lint), NCCL's own confirmation in the workers' logs (nccl_confirm) and the
GPU-health verdicts (gpu_health) all read VARIABLES: a rule about one variable (its valid
values, whether NCCL logs it, whether the guide calls it debugging-only, whether it marks a
profile as tuned for PCIe, a deprecation) is one field of its row here.

Sources: NCCL 2.30 (src/misc/param.cc, src/graph/tuning.cc, src/graph/paths.cc, src/init.cc)
and its user guide (env.html); docs in the repository summarise them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAXCHANNELS = 64  # NCCL's channel (CTA) limit: larger counts are capped to it

COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
NVLINK_ONLY_ALGORITHMS = ("NVLS", "NVLSTree")  # NVLink SHARP: needs NVSwitch
# ncclGetLevel() takes the path types up to SYS, compared case-sensitively; the guide
# documents LOC NVL PIX PXB PHB SYS.
P2P_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
P2P_LEVELS_DOCUMENTED = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
# Legacy integers, by position: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS.
P2P_LEGACY_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
# Levels that allow P2P only within one GPU or over NVLink: nothing a PCIe-only node uses.
P2P_LEVELS_WITHOUT_PCIE = ("LOC", "NVL")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
NTHREADS = (64, 128, 256, 512)


@dataclass(frozen=True)
class NcclVar:
    """One variable NCCL reads, and what this project knows about it."""

    name: str
    # How NCCL reads the value: "integer" (strtoll, `minimum` and `cap`), "choice" (an integer
    # out of `values`), "selection" (NCCL_PROTO/NCCL_ALGO lists of `values`), "p2p_level",
    # "name" (one of `values`, any case), or "" (not checked).
    kind: str = ""
    values: tuple = ()
    minimum: int = 0  # "integer": the smallest value NCCL uses
    cap: int | None = None  # "integer": the largest before NCCL caps it
    default: int | None = None
    power_of_two: bool = False  # the guide recommends powers of two
    # The protocols the variable applies to, and where the others take it from: with every
    # one of them switched off by NCCL_PROTO it has no effect.
    protocols: tuple = ()
    elsewhere: str = ""
    logged: bool = False  # NCCL logs "<name> set by environment to <value>" when read
    needs_two_ranks: bool = False  # ... but only in a communicator of at least two ranks
    debugging: bool = False  # the guide lists it under "Debugging": not for production
    pcie_tuning: bool = False  # setting it marks a profile as tuned for PCIe-only GPUs
    deprecated_since: str = ""  # NCCL version
    replaced_by: str = ""


def _integer(name, minimum=1, cap=None, **more):
    return NcclVar(name, "integer", minimum=minimum, cap=cap, **more)


def _switch(name, values=(0, 1), **more):
    return NcclVar(name, "choice", values=values, **more)


# The variables this project has rules for.
_RULES = (
    NcclVar(
        "NCCL_PROTO",
        "selection",
        PROTOCOLS,
        logged=True,
        needs_two_ranks=True,
        debugging=True,
        pcie_tuning=True,
    ),
    NcclVar(
        "NCCL_ALGO",
        "selection",
        ALGORITHMS,
        logged=True,
        needs_two_ranks=True,
        debugging=True,
        pcie_tuning=True,
    ),
    NcclVar("NCCL_P2P_LEVEL", "p2p_level", P2P_LEVELS, logged=True, debugging=True, pcie_tuning=True),
    _switch("NCCL_P2P_DISABLE", debugging=True),
    _switch("NCCL_SHM_DISABLE", debugging=True),
    _integer(
        "NCCL_MAX_NCHANNELS",
        1,
        MAXCHANNELS,
        logged=True,
        debugging=True,
        pcie_tuning=True,
        deprecated_since="2.17",
        replaced_by="NCCL_MAX_CTAS",
    ),
    _integer(
        "NCCL_MIN_NCHANNELS",
        0,
        MAXCHANNELS,
        logged=True,
        debugging=True,
        deprecated_since="2.17",
        replaced_by="NCCL_MIN_CTAS",
    ),
    _integer("NCCL_MAX_CTAS", 1, MAXCHANNELS, logged=True, debugging=True),
    _integer("NCCL_MIN_CTAS", 1, MAXCHANNELS, logged=True, debugging=True),
    _integer(
        "NCCL_BUFFSIZE",
        default=4194304,
        power_of_two=True,
        protocols=("Simple",),
        elsewhere="it sizes only the Simple protocol's buffer (LL uses NCCL_LL_BUFFSIZE)",
        logged=True,
        debugging=True,
    ),
    _switch(
        "NCCL_NTHREADS",
        NTHREADS,
        default=512,
        protocols=("Simple", "LL"),
        elsewhere="LL128 uses NCCL_LL128_NTHREADS",
        logged=True,
        debugging=True,
    ),
    _integer("NCCL_LL_BUFFSIZE", logged=True),
    _integer("NCCL_LL128_BUFFSIZE", logged=True),
    _integer("NCCL_LL128_NTHREADS", logged=True),
    _integer("NCCL_NVLS_NCHANNELS"),
    NcclVar("NCCL_DEBUG", "name", DEBUG_LEVELS),
    _switch("NCCL_NVLS_ENABLE", (0, 1, 2)),  # 2, the default: NVLS where the GPUs support it
    *(
        _switch("NCCL_" + name)
        for name in """
IB_DISABLE P2P_DIRECT_DISABLE NVB_DISABLE PXN_DISABLE CUMEM_ENABLE CUMEM_HOST_ENABLE
DMABUF_ENABLE NET_GDR_READ GDRCOPY_ENABLE COLLNET_ENABLE RUNTIME_CONNECT LOCAL_REGISTER
GRAPH_REGISTER IGNORE_CPU_AFFINITY""".split()
    ),
)

# Every other variable NCCL 2.30 reads (NCCL_PARAM, DEFINE_NCCL_PARAM and ncclGetEnv in src/).
_OTHERS = """
ALGO ALLGATHERV_ENABLE ALLOC_P2P_NET_LL_BUFFERS BUFFSIZE CGA_CLUSTER_SIZE CHECK_MODE
CHECK_POINTERS CHUNK_SIZE COLLNET_ENABLE COLLNET_NODE_THRESHOLD COMM_BLOCKING COMM_ID
COMM_SHRINK_SHARE_RESOURCES COMM_SPLIT_SHARE_RESOURCES CONF_FILE CONNECT_ROUND_MAX_PEERS
CROSS_NIC CTA_POLICY CUMEM_ENABLE CUMEM_HOST_ENABLE DEBUG DEBUG_FILE DEBUG_SUBSYS
DEBUG_TIMESTAMP_FORMAT DEBUG_TIMESTAMP_LEVELS DEV_API_JIT DISABLE_MEM_MANAGER DMABUF_ENABLE
ELASTIC_BUFFER_REGISTER ENABLE_VERSION_CHECK ENV_PLUGIN GDAKI_USE_RELIABLE_DB GDRCOPY_ENABLE
GDRCOPY_FIFO_ENABLE GDRCOPY_FLUSH_ENABLE GDRCOPY_SYNC_ENABLE GDR_FLUSH_DISABLE
GIN_CONNECTION_RAIL GIN_ENABLE GIN_ERROR_QUERY_SEC GIN_GDAKI_MAX_DEST_RD_ATOMIC
GIN_GDAKI_MAX_QP_RD_ATOMIC GIN_GDAKI_NIC_HANDLER GIN_GDAKI_QP_DEPTH GIN_IB_TC
GIN_NCONNECTIONS GIN_PLUGIN GIN_PLUGIN_REF_COUNT GIN_PROXY_QUEUE_SIZE GIN_TYPE
GRAPH_DUMP_FILE GRAPH_DUMP_FILE_RANK GRAPH_FILE GRAPH_HELPER_DISABLE GRAPH_MIXING_SUPPORT
GRAPH_REGISTER GRAPH_STREAM_ORDERING GROUP_CUDA_STREAM HOSTID IBVERBS_LIB
IB_ADAPTIVE_ROUTING IB_ADDR_FAMILY IB_ADDR_RANGE IB_AR_THRESHOLD IB_DATA_DIRECT
IB_DEVICE_PCI_ORDER IB_DISABLE IB_ECE_ENABLE IB_FIFO_TC IB_GID_INDEX IB_HCA IB_MERGE_NICS
IB_MERGE_VFS IB_MQP_RETRY_ALL IB_MQP_RETRY_CNT IB_MQP_RETRY_SLEEP_MSEC IB_OOO_RQ
IB_PCI_RELAXED_ORDERING IB_PKEY IB_PREPOST_RECEIVE_WORK_REQUESTS IB_QPS_PER_CONNECTION
IB_QUERY_PORT_SPEED IB_RECEIVER_SIDE_MATCHING_SCHEME IB_RESILIENCY_PORT_FAILOVER
IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY
IB_RESILIENCY_PORT_RECOVERY IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT
IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL
IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE
IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE
IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX
IB_RESILIENCY_PORT_RECOVERY_START_DELAY IB_RETRY_CNT IB_RETURN_ASYNC_EVENTS
IB_ROCE_VERSION_NUM IB_ROUTABLE_FLID_GID_INDEX IB_SL IB_SPLIT_DATA_ON_QPS
IB_SUBNET_AWARE_ROUTING IB_SUBNET_PREFIX_LEN IB_TC IB_TIMEOUT IB_USE_INLINE
IB_WARN_RAIL_LOCAL IGNORE_COLLNET_MISMATCH IGNORE_CPU_AFFINITY IGNORE_DISABLED_P2P
IGNORE_NET_MISMATCH IPC_USE_ABSTRACT_SOCKET L1_SHARED_MEMORY_CARVEOUT LAUNCH_MODE
LAUNCH_ORDER_IMPLICIT LAUNCH_RACE_FATAL LEGACY_CUDA_REGISTER LL128_BUFFSIZE LL128_C2C
LL128_NTHREADS LL_BUFFSIZE LOCAL_REGISTER LSA_TEAM_SIZE MAX_CTAS MAX_NCHANNELS MAX_NRINGS
MAX_P2P_NCHANNELS MEM_SYNC_DOMAIN MIN_CTAS MIN_NCHANNELS MIN_NRINGS MIN_P2P_NCHANNELS
MLOPART_RDMA_ENABLE MNNVL_CLIQUE_ID MNNVL_CROSS_CLIQUE MNNVL_ENABLE MNNVL_RAIL_PER_HOST
MNNVL_SCATTER_NETS_ENABLE MNNVL_UUID MULTI_RANK_GPU_ENABLE MULTI_SEGMENT_REGISTER
NCHANNELS_PER_NET_PEER NET NETDEVS_POLICY NET_DISABLE_INTRA NET_FORCE_FLUSH NET_FORCE_MERGE
NET_GDR_C2C NET_GDR_LEVEL NET_GDR_MLOPART NET_GDR_READ NET_MERGE_LEVEL NET_MERGE_POLICY
NET_OPTIONAL_RECV_COMPLETION NET_OVERHEAD NET_PLUGIN NET_PLUGIN_REF_COUNT NET_SHARED_BUFFERS
NET_SHARED_COMMS NO_CACHE NSOCKS_PERTHREAD NTHREADS NUM_RMA_CTX NVB_DISABLE NVB_PRECONNECT
NVLINK_UTIL_CENTRIC_SCHED_ENABLE NVLSTREE_MAX_CHUNKSIZE NVLS_CHUNKSIZE NVLS_ENABLE
NVLS_NCHANNELS NVTX_DISABLE OOB_NET_ENABLE OOB_NET_IFNAME P2P_DIRECT_DISABLE P2P_DISABLE
P2P_EPOCH_ENABLE P2P_LEVEL P2P_LL_THRESHOLD P2P_MAX_PEERS P2P_NET_CHUNKSIZE
P2P_NVL_CHUNKSIZE P2P_PCI_CHUNKSIZE P2P_PER_CHANNEL_NET_BW P2P_PXN_LEVEL P2P_READ_ENABLE
P2P_SCHEDULE_GROUP_SIZE P2P_USE_CUDA_MEMCPY PARAM_DUMP_ALL PAT_ENABLE PROFILER_PLUGIN
PROGRESS_APPENDOP_FREQ PROTO PROXY_APPEND_BATCH_SIZE PROXY_CPUSET PROXY_DUMP_SIGNAL PXN_C2C
PXN_DISABLE RAS_ADDR RAS_ENABLE RAS_TIMEOUT_FACTOR REPORT_CONNECT_PROGRESS RMA_DISABLE
RMA_PLUGIN RMA_PLUGIN_REF_COUNT RMA_PROXY_DUMP_SIGNAL RMA_PROXY_QUEUE_SIZE RUNTIME_CONNECT
SET_CPU_STACK_SIZE SET_STACK_SIZE SET_THREAD_NAME SHADOW_MEMPOOL_MAX_SIZE SHM_DISABLE
SHM_LOCALITY SINGLE_PROC_MEM_REG_ENABLE SOCKET_FAMILY SOCKET_IFNAME SOCKET_INLINE
SOCKET_MAGIC SOCKET_MIN_TASKSIZE SOCKET_NTHREADS SOCKET_POLL_TIMEOUT_MSEC SOCKET_RCVBUF
SOCKET_RETRY_CNT SOCKET_RETRY_SLEEP_MSEC SOCKET_SNDBUF SYM_CE_THRESHOLD SYM_CTAS
SYM_GIN_KERNELS_ENABLE SYM_KERNEL SYM_NOWIN_ENABLE SYM_REUSE_SYSMEM_HANDLES
SYM_RS_GIN_CHUNK_SIZE SYM_TMA_ENABLE THREAD_THRESHOLDS TOPO_DUMP_FILE TOPO_DUMP_FILE_RANK
TOPO_FILE TOPO_SPLIT_MLOPART TUNER_PLUGIN UID_STAGGER_RATE UID_STAGGER_THRESHOLD
UNPACK_DOUBLE_NCHANNELS WARN_ENABLE_DEBUG_INFO WIN_ENABLE WIN_STRIDE WORK_ARGS_BYTES
WORK_FIFO_BYTES
"""

VARIABLES = {var.name: var for var in _RULES}
VARIABLES.update(
    (name, NcclVar(name)) for name in ("NCCL_" + n for n in _OTHERS.split()) if name not in VARIABLES
)

KNOWN = frozenset(VARIABLES)
DEBUGGING = tuple(var.name for var in _RULES if var.debugging)
LOGGED = frozenset(var.name for var in _RULES if var.logged)
NEEDS_TWO_RANKS = frozenset(var.name for var in _RULES if var.needs_two_ranks)
PCIE_TUNING = tuple(var.name for var in _RULES if var.pcie_tuning)

# Names from older guides that NCCL 2.30 no longer reads, and names PyTorch reads.
RETIRED = {
    "NCCL_CHECKS_DISABLE": "",
    "NCCL_IB_CUDA_SUPPORT": "",
    "NCCL_LL_THRESHOLD": "",
    "NCCL_TREE_THRESHOLD": "",
    "NCCL_SINGLE_RING_THRESHOLD": "",
    "NCCL_RINGS": "",
    "NCCL_IB_GDR_LEVEL": " (renamed NCCL_NET_GDR_LEVEL)",
}
PYTORCH = {
    name: "TORCH_" + name
    for name in ("NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG", "NCCL_ENABLE_TIMING")
}


# -- Reading values the way NCCL does --------------------------------------------------------

C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale; Python's \s also takes U+00A0, U+2028, ...
_STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)?")
INT64 = range(-(2**63), 2**63)  # strtoll's range: beyond it errno is ERANGE and NCCL keeps its default


def strtoll(value: str) -> tuple[int, bool]:
    """C's strtoll(value, NULL, 0), as NCCL reads integer variables (ncclLoadParam): (number,
    whole value read). Leading C whitespace is skipped; base 0: 0x... is hexadecimal, a
    leading 0 octal; reading stops at the first character that does not fit, and a value
    without digits reads as 0. "Whole": nothing but C whitespace after the number (NCCL
    ignores whatever follows it; a profile that writes more meant something else). The number
    is not clamped to INT64: callers say what NCCL does out of range."""
    match = _STRTOLL.match(value)
    sign, digits = match.group(1), match.group(2)
    if not digits:
        return 0, False
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    number = int(digits, base) * (-1 if sign == "-" else 1)
    return number, match.end() == len(value.rstrip(C_SPACE))


def p2p_level(value: str) -> str | None:
    """The NCCL_P2P_LEVEL that `value` sets (a legacy integer as its level name), or None
    where NCCL ignores it (a name in another case, an unknown name). Legacy integers are
    taken whole only: NCCL reads a digit-led prefix of anything, which no profile means."""
    if value in P2P_LEVELS:
        return value
    if re.fullmatch(r"[0-9]+", value):
        number, _ = strtoll(value)
        return P2P_LEGACY_LEVELS[min(number, len(P2P_LEGACY_LEVELS) - 1)]
    return None


def tunes_for_pcie(name: str, value: str) -> bool:
    """Whether `name`=`value` is PCIe-only tuning: NCCL_P2P_LEVEL past NVLink (in any case, as
    operators write it), or any value of the other PCIe-tuning variables."""
    if name not in PCIE_TUNING or not value:
        return False
    if VARIABLES[name].kind == "p2p_level":
        level = value.strip().upper()
        return bool(level) and p2p_level(level) not in P2P_LEVELS_WITHOUT_PCIE
    return True
