"""NCCL lint: values NCCL rejects or misreads (errors), settings that do nothing or can hurt on
PCIe-only nodes (warnings). Messages are asserted exactly: they are part of the interface."""

import ctypes
import errno
import sys

import pytest

from sglang_deploy.profile.nccl_lint import Finding, lint_env, parse_selection
from sglang_deploy.profile.nccl_vars import DEBUGGING, KNOWN, PROTOCOLS, strtoll
from sglang_deploy.profile.schema import load_profile

NOTE = (
    'NCCL\'s guide lists these under "Debugging", not for production (sub-optimal '
    "behaviour, crashes or hangs): keep them only if an A/B all-reduce measurement on the "
    "node proves they help"
)


def lint(env, **kw):
    """The findings as `severity: VARIABLE: message` lines, without the "Debugging" note."""
    return [str(f) for f in lint_env(env, **kw) if f.message != NOTE]


# -- The shipped profiles --------------------------------------------------------------------


def test_baseline_env():
    assert [str(f) for f in lint_env(load_profile("baseline").env)] == [
        "warning: NCCL_MAX_NCHANNELS: deprecated since NCCL 2.17: use NCCL_MAX_CTAS",
        "warning: NCCL_BUFFSIZE: has no effect with NCCL_PROTO=LL: it sizes only the Simple "
        "protocol's buffer (LL uses NCCL_LL_BUFFSIZE)",
        "warning: NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL, NCCL_MAX_NCHANNELS, NCCL_BUFFSIZE, "
        "NCCL_NTHREADS: " + NOTE,
    ]


def test_every_shipped_profile_is_free_of_errors():
    for name in ["baseline", "eagle3-2step", "eagle3-3step", "sandbox", "sandbox-eagle3"]:
        assert [f for f in lint_env(load_profile(name).env) if f.severity == "error"] == []


def test_finding_fields():
    finding = lint_env({"NCCL_NTHREADS": "500"})[0]
    assert finding == Finding("error", "NCCL_NTHREADS", "must be 64, 128, 256 or 512 (got '500')")
    assert str(finding) == "error: NCCL_NTHREADS: must be 64, 128, 256 or 512 (got '500')"


# -- Values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        # NCCL_PROTO: names in any case, comma lists, ^ excludes, per-collective forms (2.24+)
        ({"NCCL_PROTO": "LL"}, []),
        ({"NCCL_PROTO": "ll,simple"}, []),
        ({"NCCL_PROTO": "Simple;allreduce:LL,Simple;allgather:Simple"}, []),
        ({"NCCL_PROTO": "^LL128"}, []),
        ({"NCCL_PROTO": "LL,,Simple"}, []),  # NCCL's strtok skips empty items
        ({"NCCL_PROTO": "LL256"}, ["error: NCCL_PROTO: unknown protocol 'LL256' (did you mean 'LL128'?)"]),
        (
            {"NCCL_PROTO": "fast"},
            ["error: NCCL_PROTO: unknown protocol 'fast' (expected one of: LL, LL128, Simple)"],
        ),
        (
            {"NCCL_PROTO": "Simple;allreduc:LL"},
            ["error: NCCL_PROTO: unknown collective 'allreduc' (did you mean 'AllReduce'?)"],
        ),
        (
            {"NCCL_PROTO": "Simple;all_reduce:LL"},
            ["error: NCCL_PROTO: unknown collective 'all_reduce' (did you mean 'AllReduce'?)"],
        ),
        (
            {"NCCL_PROTO": "LL;Simple"},
            [
                "error: NCCL_PROTO: 'Simple': every entry after the first needs a collective, "
                "e.g. 'allreduce:Simple'"
            ],
        ),
        (
            {"NCCL_PROTO": "^LL,LL128,Simple"},
            [
                "error: NCCL_PROTO: leaves no protocol for any collective: NCCL 2.24 and later fail "
                "instead of falling back"
            ],
        ),
        (
            {"NCCL_PROTO": "Simple;allreduce:^LL,LL128,Simple"},
            [
                "error: NCCL_PROTO: leaves no protocol for AllReduce: NCCL 2.24 and later fail instead "
                "of falling back"
            ],
        ),
        # NCCL_ALGO
        ({"NCCL_ALGO": "Ring"}, []),
        ({"NCCL_ALGO": "ring,tree;allreduce:ring;allgather:PAT"}, []),
        ({"NCCL_ALGO": "^CollnetDirect,CollnetChain"}, []),  # the guide's spelling, any case
        ({"NCCL_ALGO": "Rings"}, ["error: NCCL_ALGO: unknown algorithm 'Rings' (did you mean 'Ring'?)"]),
        (
            {"NCCL_ALGO": "^Tree,Ring,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT"},
            [
                "error: NCCL_ALGO: leaves no algorithm for any collective: NCCL 2.24 and later fail "
                "instead of falling back"
            ],
        ),
        # NCCL_P2P_LEVEL: names compared case-sensitively; legacy integers, > 4 means SYS
        ({"NCCL_P2P_LEVEL": "SYS"}, []),
        ({"NCCL_P2P_LEVEL": "PHB"}, []),
        ({"NCCL_P2P_LEVEL": "0"}, []),
        ({"NCCL_P2P_LEVEL": "4"}, []),
        ({"NCCL_P2P_LEVEL": "7"}, []),
        (
            {"NCCL_P2P_LEVEL": "sys"},
            [
                "error: NCCL_P2P_LEVEL: 'sys': NCCL matches level names case-sensitively and ignores "
                "this one (write 'SYS')"
            ],
        ),
        (
            {"NCCL_P2P_LEVEL": "NODE"},
            [
                "error: NCCL_P2P_LEVEL: 'NODE' is nvidia-smi's name, not NCCL's: NCCL ignores it "
                "(NCCL calls this level PHB)"
            ],
        ),
        (
            {"NCCL_P2P_LEVEL": "-1"},
            [
                "error: NCCL_P2P_LEVEL: unknown level '-1': NCCL ignores it (expected one of: LOC, NVL, "
                "PIX, PXB, PHB, SYS, or 0-4)"
            ],
        ),
        # NCCL_NTHREADS
        ({"NCCL_NTHREADS": "64"}, []),
        ({"NCCL_NTHREADS": "512"}, []),
        ({"NCCL_NTHREADS": "500"}, ["error: NCCL_NTHREADS: must be 64, 128, 256 or 512 (got '500')"]),
        ({"NCCL_NTHREADS": "1024"}, ["error: NCCL_NTHREADS: must be 64, 128, 256 or 512 (got '1024')"]),
        (
            {"NCCL_NTHREADS": "max"},
            ["error: NCCL_NTHREADS: must be 64, 128, 256 or 512 (got 'max', which NCCL reads as 0)"],
        ),
        # integers, read like C's strtoll(value, NULL, 0)
        (
            {"NCCL_MAX_NCHANNELS": "16"},
            ["warning: NCCL_MAX_NCHANNELS: deprecated since NCCL 2.17: use NCCL_MAX_CTAS"],
        ),
        ({"NCCL_MAX_NCHANNELS": "0"}, ["error: NCCL_MAX_NCHANNELS: must be at least 1 (got 0)"]),
        (
            {"NCCL_MAX_NCHANNELS": "128"},
            [
                "warning: NCCL_MAX_NCHANNELS: NCCL caps it at 64 (got 128)",
                "warning: NCCL_MAX_NCHANNELS: deprecated since NCCL 2.17: use NCCL_MAX_CTAS",
            ],
        ),
        (
            {"NCCL_MIN_NCHANNELS": "4"},
            ["warning: NCCL_MIN_NCHANNELS: deprecated since NCCL 2.17: use NCCL_MIN_CTAS"],
        ),
        ({"NCCL_MAX_CTAS": "16", "NCCL_MIN_CTAS": "8"}, []),
        ({"NCCL_MAX_CTAS": "0"}, ["error: NCCL_MAX_CTAS: must be at least 1 (got 0)"]),
        ({"NCCL_MIN_CTAS": "65"}, ["warning: NCCL_MIN_CTAS: NCCL caps it at 64 (got 65)"]),
        ({"NCCL_BUFFSIZE": "4194304"}, []),
        ({"NCCL_BUFFSIZE": "0x1000000"}, []),
        ({"NCCL_BUFFSIZE": "16M"}, ["error: NCCL_BUFFSIZE: '16M' is not an integer (NCCL reads it as 16)"]),
        (
            {"NCCL_BUFFSIZE": "16 MiB"},
            ["error: NCCL_BUFFSIZE: '16 MiB' is not an integer (NCCL reads it as 16)"],
        ),
        ({"NCCL_BUFFSIZE": "big"}, ["error: NCCL_BUFFSIZE: 'big' is not an integer (NCCL reads it as 0)"]),
        # strtoll skips leading whitespace (C's isspace: not U+00A0); NCCL ignores what follows
        ({"NCCL_BUFFSIZE": " 4194304"}, []),
        ({"NCCL_NTHREADS": " 256"}, []),
        ({"NCCL_NTHREADS": "\t\v\f 512 "}, []),
        (
            {"NCCL_NTHREADS": "\xa0256"},
            ["error: NCCL_NTHREADS: must be 64, 128, 256 or 512 (got '\\xa0256', which NCCL reads as 0)"],
        ),
        (
            {"NCCL_BUFFSIZE": "\u2028 4194304"},
            ["error: NCCL_BUFFSIZE: '\\u2028 4194304' is not an integer (NCCL reads it as 0)"],
        ),
        (
            {"NCCL_BUFFSIZE": " 010"},
            ["warning: NCCL_BUFFSIZE: ' 010' starts with 0: NCCL reads it as octal, 8"],
        ),
        (
            {"NCCL_BUFFSIZE": "9223372036854775808"},
            [
                "error: NCCL_BUFFSIZE: '9223372036854775808' is out of range: NCCL ignores it "
                "(its default stays)"
            ],
        ),
        ({"NCCL_BUFFSIZE": "0"}, ["error: NCCL_BUFFSIZE: must be at least 1 (got 0)"]),
        ({"NCCL_BUFFSIZE": "-4194304"}, ["error: NCCL_BUFFSIZE: must be at least 1 (got -4194304)"]),
        (
            {"NCCL_BUFFSIZE": "4000000"},
            [
                "warning: NCCL_BUFFSIZE: 4000000 is not a power of two (NCCL recommends powers of two; "
                "default 4194304)"
            ],
        ),
        (
            {"NCCL_BUFFSIZE": "010"},
            ["warning: NCCL_BUFFSIZE: '010' starts with 0: NCCL reads it as octal, 8"],
        ),
        ({"NCCL_LL_BUFFSIZE": "x"}, ["error: NCCL_LL_BUFFSIZE: 'x' is not an integer (NCCL reads it as 0)"]),
        # 0/1 switches (true/yes read as 0)
        ({"NCCL_IB_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}, []),
        (
            {"NCCL_IB_DISABLE": "true"},
            ["error: NCCL_IB_DISABLE: must be 0 or 1 (got 'true', which NCCL reads as 0)"],
        ),
        ({"NCCL_CUMEM_ENABLE": "2"}, ["error: NCCL_CUMEM_ENABLE: must be 0 or 1 (got '2')"]),
        ({"NCCL_NVLS_ENABLE": "2"}, []),  # NCCL's default: NVLS where the GPUs support it
        (
            {"NCCL_NVLS_ENABLE": "on"},
            ["error: NCCL_NVLS_ENABLE: must be 0, 1 or 2 (got 'on', which NCCL reads as 0)"],
        ),
        # NCCL_DEBUG: names in any case
        ({"NCCL_DEBUG": "info"}, []),
        (
            {"NCCL_DEBUG": "verbose"},
            [
                "error: NCCL_DEBUG: unknown level 'verbose' (expected one of: VERSION, WARN, INFO, ABORT, "
                "TRACE)"
            ],
        ),
        ({"NCCL_DEBUG": "WARNING"}, ["error: NCCL_DEBUG: unknown level 'WARNING' (did you mean 'WARN'?)"]),
        # free-form variables are not judged
        ({"NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}, []),
        ({"NCCL_PROTO": ""}, ["warning: NCCL_PROTO: empty: NCCL treats it as unset (remove it)"]),
    ],
)
def test_values(env, expected):
    assert lint(env) == expected


# -- Names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"NCCL_BUFSIZE": "4194304"},
            ["warning: NCCL_BUFSIZE: not an NCCL variable: NCCL ignores it (did you mean 'NCCL_BUFFSIZE'?)"],
        ),
        (
            {"NCCL_P2P_LVL": "SYS"},
            ["warning: NCCL_P2P_LVL: not an NCCL variable: NCCL ignores it (did you mean 'NCCL_P2P_LEVEL'?)"],
        ),
        (
            {"NCCL_MAX_NCHANNEL": "8"},
            [
                "warning: NCCL_MAX_NCHANNEL: not an NCCL variable: NCCL ignores it "
                "(did you mean 'NCCL_MAX_NCHANNELS'?)"
            ],
        ),
        (
            {"NCCL_QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ": "1"},
            ["warning: NCCL_QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ: not an NCCL variable: NCCL ignores it"],
        ),
        (
            {"nccl_proto": "LL"},
            ["warning: nccl_proto: NCCL reads upper-case names only (did you mean 'NCCL_PROTO'?)"],
        ),
        (
            {"NCCL_ASYNC_ERROR_HANDLING": "1"},
            [
                "warning: NCCL_ASYNC_ERROR_HANDLING: read by PyTorch, not NCCL, and deprecated there: "
                "use TORCH_NCCL_ASYNC_ERROR_HANDLING"
            ],
        ),
        (
            {"NCCL_IB_GDR_LEVEL": "PHB"},
            [
                "warning: NCCL_IB_GDR_LEVEL: no longer read by NCCL (renamed NCCL_NET_GDR_LEVEL): "
                "it has no effect"
            ],
        ),
        (
            {"NCCL_LL_THRESHOLD": "0"},
            ["warning: NCCL_LL_THRESHOLD: no longer read by NCCL: it has no effect"],
        ),
        ({"CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_STANDIN_LOAD_SECONDS": "3", "NCCLX": "1"}, []),
    ],
)
def test_names(env, expected):
    assert lint(env) == expected


def test_known_names_cover_what_the_profiles_and_sglang_set():
    assert {
        "NCCL_PROTO",
        "NCCL_ALGO",
        "NCCL_P2P_LEVEL",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_CTAS",
        "NCCL_LL_BUFFSIZE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_DISABLE",
        "NCCL_P2P_DISABLE",
    } <= KNOWN
    assert set(DEBUGGING) <= KNOWN


# -- Settings that do nothing or can hurt ----------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        # NCCL_BUFFSIZE sizes the Simple protocol's buffer only
        (
            {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"},
            [
                "warning: NCCL_BUFFSIZE: has no effect with NCCL_PROTO=LL: it sizes only the Simple "
                "protocol's buffer (LL uses NCCL_LL_BUFFSIZE)"
            ],
        ),
        (
            {"NCCL_BUFFSIZE": "16777216", "NCCL_PROTO": "^Simple"},  # order does not matter
            [
                "warning: NCCL_BUFFSIZE: has no effect with NCCL_PROTO=^Simple: it sizes only the Simple "
                "protocol's buffer (LL uses NCCL_LL_BUFFSIZE)",
                "warning: NCCL_PROTO: forces LL128 as well (a '^' list switches on every protocol it does "
                "not name): NCCL enables LL128 by itself only where it is supported, which PCIe is not; "
                "forced where unsupported it can corrupt data",
            ],
        ),
        ({"NCCL_PROTO": "LL;allgather:Simple", "NCCL_BUFFSIZE": "16777216"}, []),
        ({"NCCL_PROTO": "LL,Simple", "NCCL_BUFFSIZE": "16777216"}, []),
        (
            {"NCCL_PROTO": "bogus", "NCCL_BUFFSIZE": "16777216"},
            ["error: NCCL_PROTO: unknown protocol 'bogus' (expected one of: LL, LL128, Simple)"],
        ),
        # NCCL_NTHREADS does not apply to LL128
        (
            {"NCCL_PROTO": "LL128", "NCCL_NTHREADS": "256"},
            [
                "warning: NCCL_PROTO: forces LL128: NCCL enables LL128 by itself only where it is "
                "supported, which PCIe is not; forced where unsupported it can corrupt data",
                "warning: NCCL_NTHREADS: has no effect with NCCL_PROTO=LL128: LL128 uses NCCL_LL128_NTHREADS",
            ],
        ),
        # LL128 on PCIe: named, or switched on by an exclusion list
        (
            {"NCCL_PROTO": "Simple;allreduce:LL128"},
            [
                "warning: NCCL_PROTO: forces LL128: NCCL enables LL128 by itself only where it is "
                "supported, which PCIe is not; forced where unsupported it can corrupt data"
            ],
        ),
        (
            {"NCCL_PROTO": "^LL"},
            [
                "warning: NCCL_PROTO: forces LL128 as well (a '^' list switches on every protocol it does "
                "not name): NCCL enables LL128 by itself only where it is supported, which PCIe is not; "
                "forced where unsupported it can corrupt data"
            ],
        ),
        # NVLink-only features on PCIe
        (
            {"NCCL_ALGO": "NVLS,Ring"},
            [
                "warning: NCCL_ALGO: NVLS needs NVLink SHARP (NVSwitch), which a PCIe-only node does not "
                "have: NCCL cannot use it here"
            ],
        ),
        (
            {"NCCL_ALGO": "Ring;allreduce:nvlstree,nvls"},
            [
                "warning: NCCL_ALGO: NVLS and NVLSTree need NVLink SHARP (NVSwitch), which a PCIe-only "
                "node does not have: NCCL cannot use them here"
            ],
        ),
        ({"NCCL_ALGO": "^NVLS,NVLSTree"}, []),
        (
            {"NCCL_NVLS_ENABLE": "1"},
            [
                "warning: NCCL_NVLS_ENABLE: 1 forces NVLink SHARP, which needs NVSwitch; a PCIe-only node "
                "has none (leave it unset: NCCL detects support)"
            ],
        ),
        (
            {"NCCL_P2P_LEVEL": "NVL"},
            [
                "warning: NCCL_P2P_LEVEL: NVL on a PCIe-only node: P2P only over NVLink, so never (use "
                "PXB, PHB or SYS)"
            ],
        ),
    ],
)
def test_interactions_on_pcie(env, expected):
    assert lint(env) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"NCCL_PROTO": "LL128"},
        {"NCCL_PROTO": "^LL"},
        {"NCCL_ALGO": "NVLS"},
        {"NCCL_NVLS_ENABLE": "1"},
        {"NCCL_P2P_LEVEL": "NVL"},
    ],
)
def test_nvlink_nodes_may_use_nvlink_features(env):
    assert lint(env, pcie_only=False) == []


def test_pcie_only_is_the_default():
    assert lint({"NCCL_NVLS_ENABLE": "1"}) == lint({"NCCL_NVLS_ENABLE": "1"}, pcie_only=True) != []


# -- The "Debugging" note --------------------------------------------------------------------


def test_one_note_for_all_debugging_variables_in_profile_order():
    findings = lint_env(
        {"NCCL_NTHREADS": "512", "NCCL_DEBUG": "INFO", "NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
    )
    notes = [f for f in findings if f.message == NOTE]
    assert notes == [Finding("warning", "NCCL_NTHREADS, NCCL_PROTO, NCCL_P2P_LEVEL", NOTE)]
    assert findings[-1] == notes[0]


def test_no_note_without_debugging_variables():
    assert lint_env({"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0", "OTHER": "x"}) == []
    assert lint_env({}) == []


# -- NCCL's own readers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16", (16, True)),
        ("0x10", (16, True)),
        ("010", (8, True)),
        ("0", (0, True)),
        ("-3", (-3, True)),
        ("+3", (3, True)),
        ("16M", (16, False)),
        ("abc", (0, False)),
        ("", (0, False)),
        ("09", (0, False)),
        (" 7", (7, True)),
        ("\t\n\v\f\r 7 \t", (7, True)),
        ("\xa07", (0, False)),
        ("0x", (0, False)),
        ("- 3", (0, False)),
        ("7 8", (7, False)),
    ],
)
def test_strtoll_reads_like_c(text, expected):
    assert strtoll(text) == expected


# What the C library's own strtoll(value, &end, 0) makes of them (glibc, called through ctypes).
C_CASES = [
    " 256",
    "\t\n\v\f\r256",
    "256 ",
    "256\t",
    "\xa0256",
    "\u2028256",
    "\x1c256",
    "0x1F",
    " 0X1f",
    "0x",
    "0xg",
    "010",
    "09",
    "-0x10",
    "+ 1",
    "--1",
    "1e3",
    "16M",
    "",
    " ",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "0x8000000000000000",
]


C_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale


def c_strtoll(text):
    """(number, bytes read, errno) from libc's strtoll."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.strtoll.restype = ctypes.c_longlong
    libc.strtoll.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]
    buffer = ctypes.create_string_buffer(text.encode())
    end = ctypes.c_char_p()
    ctypes.set_errno(0)
    number = libc.strtoll(buffer, ctypes.byref(end), 0)
    read = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buffer)
    return number, read, ctypes.get_errno()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's strtoll")
@pytest.mark.parametrize("text", C_CASES)
def test_strtoll_agrees_with_the_c_library(text):
    number, read, error = c_strtoll(text)
    ours, whole = strtoll(text)
    assert whole == (read > 0 and text.encode()[read:].strip(C_SPACE) == b"")
    if error == errno.ERANGE:
        assert not -(2**63) <= ours < 2**63
    else:
        assert (ours, error) == (number, 0)


def test_selection_states():
    out = []
    selection = parse_selection("NCCL_PROTO", "^LL128;allreduce:LL", PROTOCOLS, out)
    assert out == []
    assert selection.enabled["AllReduce"] == {"LL": 1, "LL128": 0, "Simple": 0}
    assert selection.enabled["AllGather"] == {"LL": 1, "LL128": 0, "Simple": 1}
    assert selection.named["AllReduce"] == {"LL"} and selection.named["AllGather"] == set()
    default = parse_selection("NCCL_PROTO", "allreduce:Simple", PROTOCOLS, out)
    assert default.enabled["Broadcast"] == {"LL": 1, "LL128": 2, "Simple": 1}  # 2: NCCL decides
    assert not default.forced("LL128")
