"""The arguments of the server.

Only the flags the deploy's profiles use exist here, with the names, aliases, types,
defaults and help of SGLang 0.5.23's parser (read from the released wheel), so that an argv
the stand-in accepts is one SGLang accepts and a mistake fails the same way: argparse prints
usage plus `sglang serve: error: ...` and exits 2.

Two consequences of 0.5.23's parser worth knowing:
* It has no `--cuda-graph-max-bs` any more, only `--cuda-graph-max-bs-decode` and
  `--cuda-graph-max-bs-prefill`; with argparse's prefix matching `--cuda-graph-max-bs`
  is "ambiguous option ... could match --cuda-graph-max-bs-decode,
  --cuda-graph-max-bs-prefill" (exit 2). Both flags exist here for that reason.
* `--speculative-algorithm` is a free string at parse time; an unknown name fails later,
  before anything is spawned: `ValueError: Unknown speculative algorithm name: X` (exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Optional

# Builtin speculative algorithms of SGLang 0.5.23 (names are matched case-insensitively;
# NEXTN is an alias of EAGLE).
SPECULATIVE_ALGORITHMS = (
    "DFLASH",
    "UNO",
    "DSPARK",
    "EAGLE",
    "EAGLE3",
    "FROZEN_KV_MTP",
    "STANDALONE",
    "NGRAM",
    "NONE",
    "NEXTN",
)


def human_readable_int(value: str) -> int:
    """Supports standard SI suffixes (k, M, G, T) and IEC suffixes
    (Ki, Mi, Gi, Ti). Suffixes are case-sensitive.

    Decimals are allowed for SI suffixes only.

    Examples:
        '1k' -> 1000      '1M' -> 1000000    '25.6k' -> 25600
        '1Ki' -> 1024     '1Mi' -> 1048576
    """
    # argparse names this function in its error: "invalid human_readable_int value".
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'."
                )
            return int(number) * iec[suffix]
        return int(float(number) * si[suffix])
    return int(value)


@dataclasses.dataclass
class ServerArgs:
    """Server-wide configuration (the subset of SGLang's fields the profiles use)."""

    # Model and tokenizer
    model_path: str
    trust_remote_code: bool = False
    context_length: Optional[int] = None

    # Memory and scheduling
    mem_fraction_static: Optional[float] = None

    # Distributed topology and parallelism
    dist_timeout: Optional[int] = None
    dist_init_addr: Optional[str] = None
    nnodes: int = 1
    node_rank: int = 0
    tp_size: int = 1

    # Device info and server timeout
    watchdog_timeout: float = 300

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000

    # API related
    served_model_name: Optional[str] = None

    # Logging, metrics
    enable_metrics: bool = False

    # Cuda graphs
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_max_bs_prefill: Optional[int] = None

    # Speculative decoding
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None

    def __post_init__(self):
        # Like SGLang: /v1/models lists the model path unless a name is given.
        if self.served_model_name is None:
            self.served_model_name = self.model_path

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Register the flags, with SGLang's spelling, aliases, types and defaults."""
        d = ServerArgs  # defaults come from the dataclass, as in SGLang
        parser.add_argument(
            "--model-path",
            "--model",
            type=str,
            dest="model_path",
            required=True,
            help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
        )
        parser.add_argument(
            "--trust-remote-code",
            action="store_true",
            default=d.trust_remote_code,
            help="Whether or not to allow for custom models defined on the Hub in their own modeling files.",
        )
        parser.add_argument(
            "--context-length",
            type=human_readable_int,
            default=d.context_length,
            help="The model's maximum context length. Defaults to None (will use the value from the model's config.json instead)."
            f"\n\n{human_readable_int.__doc__}",
        )
        parser.add_argument(
            "--mem-fraction-static",
            type=float,
            default=d.mem_fraction_static,
            help="The fraction of the memory used for static allocation (model weights and KV cache memory pool). Use a smaller value if you see out-of-memory errors.",
        )
        parser.add_argument(
            "--dist-timeout",
            type=int,
            default=d.dist_timeout,
            help="Set timeout for torch.distributed initialization.",
        )
        parser.add_argument(
            "--dist-init-addr",
            "--nccl-init-addr",
            type=str,
            dest="dist_init_addr",
            default=d.dist_init_addr,
            help="The host address for initializing distributed backend (e.g., `192.168.0.2:25000`).",
        )
        parser.add_argument("--nnodes", type=int, default=d.nnodes, help="The number of nodes.")
        parser.add_argument("--node-rank", type=int, default=d.node_rank, help="The node rank.")
        parser.add_argument(
            "--tp-size",
            "--tensor-parallel-size",
            type=int,
            dest="tp_size",
            default=d.tp_size,
            help="The tensor parallelism size.",
        )
        parser.add_argument(
            "--watchdog-timeout",
            type=float,
            default=d.watchdog_timeout,
            help="Set watchdog timeout in seconds. If a forward batch takes longer than this, the server will crash to prevent hanging.",
        )
        parser.add_argument("--host", type=str, default=d.host, help="The host of the HTTP server.")
        parser.add_argument("--port", type=int, default=d.port, help="The port of the HTTP server.")
        parser.add_argument(
            "--served-model-name",
            type=str,
            default=d.served_model_name,
            help="Override the model name returned by the v1/models endpoint in OpenAI API server.",
        )
        parser.add_argument(
            "--enable-metrics",
            action="store_true",
            default=d.enable_metrics,
            help="Enable log prometheus metrics.",
        )
        parser.add_argument(
            "--cuda-graph-max-bs-decode",
            type=int,
            default=d.cuda_graph_max_bs_decode,
            help="Maximum batch size captured for the decode cuda graph.",
        )
        parser.add_argument(
            "--cuda-graph-max-bs-prefill",
            type=int,
            default=d.cuda_graph_max_bs_prefill,
            help="Maximum batch size captured for the prefill cuda graph.",
        )
        parser.add_argument(
            "--speculative-algorithm",
            type=str,
            default=d.speculative_algorithm,
            help="Speculative algorithm. Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, "
            "DSPARK, UNO. Or any name registered via `SpeculativeAlgorithm.register`.",
        )
        parser.add_argument(
            "--speculative-draft-model-path",
            "--speculative-draft-model",
            type=str,
            dest="speculative_draft_model_path",
            default=d.speculative_draft_model_path,
            help="The path of the draft model weights. This can be a local folder or a Hugging Face repo ID.",
        )
        parser.add_argument(
            "--speculative-num-steps",
            type=int,
            default=d.speculative_num_steps,
            help="The number of steps sampled from draft model in Speculative Decoding.",
        )
        parser.add_argument(
            "--speculative-eagle-topk",
            type=int,
            default=d.speculative_eagle_topk,
            help="The number of tokens sampled from the draft model in eagle2 each step.",
        )
        parser.add_argument(
            "--speculative-num-draft-tokens",
            type=int,
            default=d.speculative_num_draft_tokens,
            help="The number of tokens sampled from the draft model in Speculative Decoding.",
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names})

    def check_server_args(self) -> None:
        """Checks SGLang makes before launching anything (an exception: exit 1)."""
        if self.speculative_algorithm is not None and (
            self.speculative_algorithm.upper() not in SPECULATIVE_ALGORITHMS
        ):
            raise ValueError(f"Unknown speculative algorithm name: {self.speculative_algorithm}")
        assert self.tp_size % self.nnodes == 0, "tp_size must be divisible by number of nodes"
        # 0.5.23 checks nothing else about the nodes: no --dist-init-addr with --nnodes > 1, or a
        # --node-rank outside [0, nnodes), is accepted and only shows as a rendezvous that never
        # completes (dist_group).


def make_parser() -> argparse.ArgumentParser:
    """SGLang's parser is named `sglang serve`; its usage and error lines say so."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parse argv into ServerArgs; unknown flags or bad values exit 2 with argparse's message."""
    raw_args = make_parser().parse_args(argv)
    return ServerArgs.from_cli_args(raw_args)
