"""Lint of a profile's NCCL_* variables.

Errors are values NCCL rejects, ignores or silently reads as something else; warnings are
settings that do nothing or can hurt, most of all on PCIe-only nodes (no NVLink), the nodes
this project is for. The rules follow NCCL's own parsing (NCCL 2.30 sources:
src/graph/tuning.cc parseList() for NCCL_PROTO/NCCL_ALGO, src/graph/paths.cc ncclGetLevel()
for NCCL_P2P_LEVEL, src/include/param.h and src/misc/param.cc for integers, which NCCL reads
with strtoll(value, NULL, 0)) and its user guide (env.html).

Messages are part of the interface: tests and operators match them, so they change only on
purpose.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Optional

Severity = Literal["error", "warning"]

MAXCHANNELS = 64  # NCCL's channel (CTA) limit: larger counts are capped to it


@dataclass(frozen=True)
class Finding:
    severity: Severity
    variable: str   # the variable, or several joined by ", " for a note about a group
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.variable}: {self.message}"


# -- What NCCL knows -------------------------------------------------------------------------

# Every variable NCCL 2.30 reads (NCCL_PARAM, DEFINE_NCCL_PARAM and ncclGetEnv in src/).
KNOWN = frozenset("NCCL_" + name for name in """
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
""".split())

# Names from older guides that NCCL 2.30 no longer reads, and names PyTorch reads.
RETIRED = {
    "NCCL_CHECKS_DISABLE": "", "NCCL_IB_CUDA_SUPPORT": "", "NCCL_LL_THRESHOLD": "",
    "NCCL_TREE_THRESHOLD": "", "NCCL_SINGLE_RING_THRESHOLD": "", "NCCL_RINGS": "",
    "NCCL_IB_GDR_LEVEL": " (renamed NCCL_NET_GDR_LEVEL)",
}
PYTORCH = {name: "TORCH_" + name for name in (
    "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG", "NCCL_ENABLE_TIMING")}

# The variables of this lint's rules that NCCL's guide lists under "Debugging": "should not be
# used in production nor retained in scripts ... may result in sub-optimal behavior, crashes,
# or hangs".
DEBUGGING = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
             "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS",
             "NCCL_BUFFSIZE", "NCCL_NTHREADS")

COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
NVLINK_ONLY_ALGORITHMS = ("NVLS", "NVLSTree")  # NVLink SHARP: needs NVSwitch
# ncclGetLevel() takes the path types up to SYS, compared case-sensitively; the guide
# documents LOC NVL PIX PXB PHB SYS. Legacy integers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4+ SYS.
P2P_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
P2P_LEVELS_DOCUMENTED = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
NTHREADS = (64, 128, 256, 512)

# name: (smallest value NCCL uses, largest before NCCL caps it, or None)
INTEGERS = {
    "NCCL_MAX_NCHANNELS": (1, MAXCHANNELS), "NCCL_MIN_NCHANNELS": (0, MAXCHANNELS),
    "NCCL_MAX_CTAS": (1, MAXCHANNELS), "NCCL_MIN_CTAS": (1, MAXCHANNELS),
    "NCCL_BUFFSIZE": (1, None), "NCCL_LL_BUFFSIZE": (1, None), "NCCL_LL128_BUFFSIZE": (1, None),
    "NCCL_LL128_NTHREADS": (1, None), "NCCL_NVLS_NCHANNELS": (1, None),
}
# name: the values NCCL gives a meaning to
CHOICES = {name: (0, 1) for name in (
    "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_NVB_DISABLE", "NCCL_PXN_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_DMABUF_ENABLE", "NCCL_NET_GDR_READ", "NCCL_GDRCOPY_ENABLE", "NCCL_COLLNET_ENABLE",
    "NCCL_RUNTIME_CONNECT", "NCCL_LOCAL_REGISTER", "NCCL_GRAPH_REGISTER",
    "NCCL_IGNORE_CPU_AFFINITY")}
CHOICES["NCCL_NVLS_ENABLE"] = (0, 1, 2)  # 2, the default: use NVLS where the GPUs support it
CHOICES["NCCL_NTHREADS"] = NTHREADS


# -- Reading values the way NCCL does --------------------------------------------------------

_STRTOLL = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)?")


def strtoll(value: str) -> tuple[int, bool]:
    """C's strtoll(value, NULL, 0), as NCCL reads integer variables: (number, whole value
    read). Base 0: 0x... is hexadecimal, a leading 0 octal; reading stops at the first
    character that does not fit, and a value without digits reads as 0."""
    match = _STRTOLL.match(value)
    sign, digits = match.group(1), match.group(2)
    if not digits:
        return 0, False
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    number = int(digits, base) * (-1 if sign == "-" else 1)
    return number, match.end() == len(value)


def _integer(name: str, value: str, out: list[Finding]) -> Optional[int]:
    """`value` as NCCL reads it, or None (with an error) when it is not an integer."""
    number, whole = strtoll(value)
    if not whole or value != value.strip():
        out.append(Finding("error", name,
                           f"{value!r} is not an integer (NCCL reads it as {number})"))
        return None
    if re.fullmatch(r"[+-]?0[0-7]+", value):
        out.append(Finding("warning", name,
                           f"{value!r} starts with 0: NCCL reads it as octal, {number}"))
    return number


# -- NCCL_PROTO / NCCL_ALGO ------------------------------------------------------------------

@dataclass
class Selection:
    """What an NCCL_PROTO or NCCL_ALGO value selects, per collective: 1 on, 0 off, 2 NCCL's
    own choice (LL128's default: on only where the hardware supports it)."""

    enabled: dict[str, dict[str, int]]
    named: dict[str, set[str]]  # per collective, the elements the value names to switch on

    def everywhere_off(self, element: str) -> bool:
        return all(states[element] == 0 for states in self.enabled.values())

    def forced(self, element: str) -> bool:
        return any(states[element] == 1 for states in self.enabled.values())

    def only(self, element: str) -> bool:
        return all(states[element] != 0 and sum(1 for s in states.values() if s) == 1
                   for states in self.enabled.values())


def parse_selection(name: str, value: str, elements: tuple[str, ...],
                    out: list[Finding]) -> Optional[Selection]:
    """NCCL's parseList(): `[^]a,b` or `[^]a,b;collective:[^]c;...`, names in any case; each
    list replaces the selection of the collectives it applies to. None (with errors) where
    NCCL would fail."""
    kind = "protocol" if elements is PROTOCOLS else "algorithm"
    default = {e: 2 if e == "LL128" else 1 for e in elements}
    enabled = {c: dict(default) for c in COLLECTIVES}
    named: dict[str, set[str]] = {c: set() for c in COLLECTIVES}
    ok = True
    position = 0
    for entry in value.split(";"):
        first, position = position == 0, position + len(entry) + 1
        parts = [p for p in entry.split(":") if p]
        if not parts:
            continue  # strtok skips empty entries
        if len(parts) == 1:
            if not first:
                out.append(Finding("error", name, f"{entry!r}: every entry after the first needs "
                                                  f"a collective, e.g. 'allreduce:{entry}'"))
                ok = False
                continue
            prefix, items = None, parts[0]
        else:
            prefix, items = parts[0], parts[1]
        targets = list(COLLECTIVES)
        if prefix is not None:
            match = _lookup(prefix, COLLECTIVES)
            if match is None:
                out.append(Finding("error", name, f"unknown collective {prefix!r}"
                                   + _hint(prefix, COLLECTIVES)))
                ok = False
                continue
            targets = [match]
        exclude = items.startswith("^")
        chosen = []
        for item in (i for i in items.lstrip("^").split(",") if i):
            match = _lookup(item, elements)
            if match is None:
                out.append(Finding("error", name,
                                   f"unknown {kind} {item!r}" + _hint(item, elements)))
                ok = False
            else:
                chosen.append(match)
        for collective in targets:
            enabled[collective] = {e: int(exclude) for e in elements}
            for element in chosen:
                enabled[collective][element] = int(not exclude)
            named[collective] = set() if exclude else set(chosen)
    if not ok:
        return None
    empty = [c for c in COLLECTIVES if not any(enabled[c].values())]
    if empty:
        which = "any collective" if len(empty) == len(COLLECTIVES) else ", ".join(empty)
        out.append(Finding("error", name, f"leaves no {kind} for {which}: NCCL 2.24 and later "
                                          f"fail instead of falling back"))
        return None
    return Selection(enabled, named)


def _lookup(word: str, choices: tuple[str, ...]) -> Optional[str]:
    return next((c for c in choices if c.lower() == word.lower()), None)


def _hint(word: str, choices) -> str:
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    if close:
        return f" (did you mean {by_lower[close[0]]!r}?)"
    return f" (expected one of: {', '.join(choices)})"


# -- The lint --------------------------------------------------------------------------------

def lint_env(env: Mapping[str, str], *, pcie_only: bool = True) -> list[Finding]:
    """Findings about the NCCL_* variables in `env` (other variables are not looked at), in
    the order of `env`, then one note about the "Debugging" variables it sets.

    `pcie_only`: the GPUs talk over PCIe only (no NVLink, no NVSwitch).
    """
    out: list[Finding] = []
    # NCCL_PROTO decides what some other variables do; its own findings come in its turn.
    proto = (parse_selection("NCCL_PROTO", env["NCCL_PROTO"], PROTOCOLS, [])
             if env.get("NCCL_PROTO") else None)
    for name, value in env.items():
        if not name.upper().startswith("NCCL_"):
            continue
        if name != name.upper() and name.upper() in KNOWN:
            out.append(Finding("warning", name, f"NCCL reads upper-case names only "
                                                f"(did you mean {name.upper()!r}?)"))
        elif name in PYTORCH:
            out.append(Finding("warning", name, f"read by PyTorch, not NCCL, and deprecated "
                                                f"there: use {PYTORCH[name]}"))
        elif name in RETIRED:
            out.append(Finding("warning", name, f"no longer read by NCCL{RETIRED[name]}: "
                                                f"it has no effect"))
        elif name not in KNOWN:
            close = difflib.get_close_matches(name, sorted(KNOWN), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(Finding("warning", name, f"not an NCCL variable: NCCL ignores it{hint}"))
        elif value == "":
            out.append(Finding("warning", name, "empty: NCCL treats it as unset (remove it)"))
        else:
            _check(name, value, env, proto, pcie_only, out)
    debugging = [name for name in env if name in DEBUGGING and env[name] != ""]
    if debugging:
        out.append(Finding("warning", ", ".join(debugging),
                           'NCCL\'s guide lists these under "Debugging", not for production '
                           '(sub-optimal behaviour, crashes or hangs): keep them only if an A/B '
                           'all-reduce measurement on the node proves they help'))
    return out


def _check(name: str, value: str, env: Mapping[str, str], proto: Optional[Selection],
           pcie_only: bool, out: list[Finding]) -> None:
    """The findings of one known, non-empty NCCL variable."""
    if name == "NCCL_PROTO":
        selection = parse_selection(name, value, PROTOCOLS, out)
        if selection and pcie_only and selection.forced("LL128"):
            named = any("LL128" in n for n in selection.named.values())
            how = "forces LL128" if named else (
                "forces LL128 as well (a '^' list switches on every protocol it does not name)")
            out.append(Finding("warning", name, f"{how}: NCCL enables LL128 by itself only "
                                                f"where it is supported, which PCIe is not; "
                                                f"forced where unsupported it can corrupt data"))
    elif name == "NCCL_ALGO":
        selection = parse_selection(name, value, ALGORITHMS, out)
        if selection and pcie_only:
            nvlink = [a for a in NVLINK_ONLY_ALGORITHMS
                      if any(a in n for n in selection.named.values())]
            if nvlink:
                verb, pronoun = ("needs", "it") if len(nvlink) == 1 else ("need", "them")
                out.append(Finding("warning", name, f"{' and '.join(nvlink)} {verb} NVLink SHARP "
                                                    f"(NVSwitch), which a PCIe-only node does not "
                                                    f"have: NCCL cannot use {pronoun} here"))
    elif name == "NCCL_P2P_LEVEL":
        _check_p2p_level(name, value, pcie_only, out)
    elif name == "NCCL_DEBUG":
        if _lookup(value, DEBUG_LEVELS) is None:
            out.append(Finding("error", name,
                               f"unknown level {value!r}" + _hint(value, DEBUG_LEVELS)))
    elif name in CHOICES:
        choices = CHOICES[name]
        number, whole = strtoll(value)
        if not (whole and value == value.strip() and number in choices):
            alternatives = ", ".join(map(str, choices[:-1])) + f" or {choices[-1]}"
            read = "" if whole else f", which NCCL reads as {number}"
            out.append(Finding("error", name, f"must be {alternatives} (got {value!r}{read})"))
        elif name == "NCCL_NTHREADS" and proto and proto.only("LL128"):
            out.append(Finding("warning", name, "has no effect with NCCL_PROTO="
                                                f"{env['NCCL_PROTO']}: LL128 uses "
                                                "NCCL_LL128_NTHREADS"))
        elif name == "NCCL_NVLS_ENABLE" and number == 1 and pcie_only:
            out.append(Finding("warning", name, "1 forces NVLink SHARP, which needs NVSwitch; a "
                                                "PCIe-only node has none (leave it unset: NCCL "
                                                "detects support)"))
    elif name in INTEGERS:
        number = _integer(name, value, out)
        if number is None:
            return
        low, cap = INTEGERS[name]
        if number < low:
            out.append(Finding("error", name, f"must be at least {low} (got {number})"))
            return
        if cap is not None and number > cap:
            out.append(Finding("warning", name, f"NCCL caps it at {cap} (got {number})"))
        if name == "NCCL_BUFFSIZE":
            if number & (number - 1):
                out.append(Finding("warning", name, f"{number} is not a power of two (NCCL "
                                                    f"recommends powers of two; default 4194304)"))
            if proto and proto.everywhere_off("Simple"):
                out.append(Finding("warning", name, "has no effect with NCCL_PROTO="
                                                    f"{env['NCCL_PROTO']}: it sizes only the "
                                                    "Simple protocol's buffer (LL uses "
                                                    "NCCL_LL_BUFFSIZE)"))
        if name in ("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS"):
            ctas = name.replace("NCHANNELS", "CTAS")
            out.append(Finding("warning", name, f"deprecated since NCCL 2.17: use {ctas}"))


def _check_p2p_level(name: str, value: str, pcie_only: bool, out: list[Finding]) -> None:
    documented = ", ".join(P2P_LEVELS_DOCUMENTED)
    if value in P2P_LEVELS:
        if value == "NVL" and pcie_only:
            out.append(Finding("warning", name, "NVL on a PCIe-only node: P2P only over NVLink, "
                                                "so never (use PXB, PHB or SYS)"))
    elif re.fullmatch(r"[0-9]+", value):
        pass  # legacy integers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS
    elif value.upper() in P2P_LEVELS:
        out.append(Finding("error", name, f"{value!r}: NCCL matches level names case-sensitively "
                                          f"and ignores this one (write {value.upper()!r})"))
    elif value.upper() == "NODE":
        out.append(Finding("error", name, f"{value!r} is nvidia-smi's name, not NCCL's: NCCL "
                                          f"ignores it (NCCL calls this level PHB)"))
    else:
        out.append(Finding("error", name, f"unknown level {value!r}: NCCL ignores it (expected "
                                          f"one of: {documented}, or 0-4)"))
