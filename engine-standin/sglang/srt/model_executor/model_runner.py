"""The start-up a scheduler goes through, as SGLang's ModelRunner logs it.

Phases and their lines, worded as SGLang 0.5.23 words them (each prefixed
"[<time> TP<rank>]" when --tp-size > 1, "[<time>]" otherwise):

    Init parallel begin.                      NCCL (or its INFO lines) here
    Init parallel ends. elapsed=... s
    Memory baseline taken. mem usage=... GB
    Load weight begin. avail mem=... GB       60 % of SGLANG_STANDIN_LOAD_SECONDS
    Load weight end. elapsed=... s, type=..., avail mem=... GB, mem usage=... GB.
    KV Cache is allocated. dtype: ..., #tokens: ..., K size: ... GB, V size: ... GB
    Memory pool end. avail mem=... GB
    Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=... GB
    Capture target decode CUDA graph end. bs=[...], elapsed=... s, mem usage=... GB, avail mem=... GB.
                                              40 % of SGLANG_STANDIN_LOAD_SECONDS
    ("target verify" instead of "target decode" with --speculative-algorithm)

Memory figures are derived from config.json and --mem-fraction-static for a 96 GB card;
they only have to look plausible. Failure injection hooks into the phase it belongs to.
"""

from __future__ import annotations

import logging
import os
import time

from sglang.srt.sandbox import dist_group, failures, nccl_info, real_nccl
from sglang.srt.sandbox.knobs import Knobs
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

GPU_TOTAL_GB = 94.97
LOAD_WEIGHT_SHARE = 0.6  # the rest of SGLANG_STANDIN_LOAD_SECONDS is CUDA graph capture

_DTYPES = {"float16": "torch.float16", "bfloat16": "torch.bfloat16", "float32": "torch.float16"}


class ModelRunner:
    def __init__(
        self,
        server_args: ServerArgs,
        knobs: Knobs,
        hf_config: dict,
        context_len: int,
        tp_rank: int,
        gpu_id: int,
        fails_here: bool,
        nccl_init_addr: str,
    ):
        self.server_args = server_args
        self.knobs = knobs
        self.hf_config = hf_config
        self.context_len = context_len
        self.tp_rank = tp_rank
        self.tp_size = server_args.tp_size
        self.gpu_id = gpu_id
        self.fails_here = fails_here
        self.nccl_init_addr = nccl_init_addr
        self.total_gb = GPU_TOTAL_GB
        self.avail_gb = GPU_TOTAL_GB - 0.5  # CUDA context
        self.group = None  # the multi-node process group (dist_group), --nnodes > 1 only

        self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        self.init_cuda_graphs()

    # ------------------------------------------------------------------ phases
    def init_torch_distributed(self):
        tic = time.perf_counter()
        logger.info("Init parallel begin.")
        if self.server_args.nnodes > 1:
            timeout = self.server_args.dist_timeout or self.knobs.dist_timeout_seconds
            self.group = dist_group.join_group(self.nccl_init_addr, self.tp_rank, self.tp_size, timeout)
        if self.knobs.real_nccl:
            info = real_nccl.init_and_all_reduce(
                self.tp_rank, self.tp_size, self.gpu_id, self._real_nccl_addr()
            )
            # From here on the figures start from the real device's memory.
            self.avail_gb, self.total_gb = real_nccl.device_memory_gib(info["device"])
            logger.info(f"sglang is using nccl=={info['nccl_version']}")
        else:
            logger.info(f"sglang is using nccl=={nccl_info.NCCL_VERSION}")
            if self.tp_rank == 0:
                nccl_info.emit(nccl_info.version_line(os.environ, self.gpu_id))
            nccl_info.emit(nccl_info.confirmation_lines(os.environ, self.gpu_id, self.tp_size))
        if self.knobs.fail == "nccl-error" and self.fails_here:
            failures.sleep_then(self.knobs.fail_after_seconds)
            failures.nccl_error(self.gpu_id)
        if self.tp_size > 2:
            # What SGLang prints on PCIe-only boxes: every all-reduce goes through NCCL.
            logger.warning(
                "CustomAllreduce is disabled because it's not supported on more than two "
                "PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True "
                "explicitly."
            )
        logger.info(f"Init parallel ends. elapsed={time.perf_counter() - tic:.2f} s")
        self._use(0.13)
        logger.info("Memory baseline taken. mem usage=0.13 GB")

    def load_model(self):
        logger.info(f"Load weight begin. avail mem={self._avail():.2f} GB")
        fail = self.knobs.fail
        if fail == "hang":
            failures.hang_forever()
        if fail in ("crash-load", "cuda-oom") and self.fails_here:
            failures.sleep_then(self.knobs.fail_after_seconds)
            if fail == "crash-load":
                failures.crash_load(self.server_args.model_path)
            failures.cuda_oom(self.gpu_id, self.total_gb)
        tic = time.perf_counter()
        shards = 2
        if self.tp_rank == 0:
            print(
                f"Loading safetensors checkpoint shards:   0% Completed | 0/{shards} [00:00<?, ?it/s]",
                flush=True,
            )
        seconds = self.knobs.load_seconds * LOAD_WEIGHT_SHARE
        time.sleep(seconds)
        if self.tp_rank == 0:
            rate = shards / seconds if seconds > 0 else 99.0
            print(
                f"Loading safetensors checkpoint shards: 100% Completed | {shards}/{shards} "
                f"[00:{int(seconds):02d}<00:00, {rate:.2f}it/s]",
                flush=True,
            )
        weights = self._weight_gb()
        self._use(weights)
        arch = (self.hf_config.get("architectures") or ["LlamaForCausalLM"])[0]
        logger.info(
            f"Load weight end. elapsed={time.perf_counter() - tic:.2f} s, type={arch}, "
            f"avail mem={self._avail():.2f} GB, mem usage={weights:.2f} GB."
        )

    def init_memory_pool(self):
        self._collective()  # SGLang all-reduces the ranks' free memory here
        fraction = self.server_args.mem_fraction_static or 0.88
        used = self.total_gb - self.avail_gb
        kv_gb = max(0.1, fraction * self.total_gb - used)
        self.max_total_num_tokens = max(1, int(kv_gb * 1e9 / self._kv_bytes_per_token()))
        self._use(kv_gb)
        dtype = _DTYPES.get(str(self.hf_config.get("torch_dtype", "bfloat16")), "torch.bfloat16")
        logger.info(
            f"KV Cache is allocated. dtype: {dtype}, #tokens: {self.max_total_num_tokens}, "
            f"K size: {kv_gb / 2:.2f} GB, V size: {kv_gb / 2:.2f} GB"
        )
        logger.info(f"Memory pool end. avail mem={self._avail():.2f} GB")

    def init_cuda_graphs(self):
        args = self.server_args
        tic = time.perf_counter()
        before = self._avail()
        if args.speculative_algorithm:
            capture_name = "target verify"
            tokens_per_req = args.speculative_num_draft_tokens or (args.speculative_num_steps or 3) + 1
        else:
            capture_name, tokens_per_req = "target decode", 1
        logger.info(
            f"Capture {capture_name} CUDA graph begin. backend=full, "
            f"num_tokens_per_req={tokens_per_req}, avail mem={before:.2f} GB"
        )
        time.sleep(self.knobs.load_seconds * (1 - LOAD_WEIGHT_SHARE))
        max_bs = args.cuda_graph_max_bs_decode or 256
        capture_bs = sorted(
            {b for b in [1, 2, 4, 8, 12, *range(16, max_bs + 1, 8)] if b <= max_bs} | {max_bs}
        )
        graph_gb = min(0.25 + 0.005 * max_bs, before * 0.5)
        self._use(graph_gb)
        logger.info(
            f"Capture {capture_name} CUDA graph end. bs={capture_bs}, "
            f"elapsed={time.perf_counter() - tic:.2f} s, mem usage={graph_gb:.2f} GB, "
            f"avail mem={self._avail():.2f} GB."
        )
        self._collective()  # the capture's forward passes all-reduce across ranks

    def _real_nccl_addr(self) -> str:
        """Across nodes the stand-in's own group holds the init port: torch meets on the next."""
        if self.group is None:
            return self.nccl_init_addr
        host, port = dist_group.split_addr(self.nccl_init_addr)
        return f"{host}:{port + 1}"

    def _collective(self):
        """Across nodes, each rank waits here for all the others (a lost one raises)."""
        if self.group is not None:
            self.group.barrier()

    # ------------------------------------------------------------------ figures
    def _avail(self) -> float:
        return self.avail_gb

    def _use(self, gb: float) -> None:
        self.avail_gb = max(0.0, self.avail_gb - gb)

    def _dims(self):
        c = (
            self.hf_config.get("text_config")
            if isinstance(self.hf_config.get("text_config"), dict)
            else self.hf_config
        )
        hidden = int(c.get("hidden_size") or 4096)
        heads = int(c.get("num_attention_heads") or 32)
        return {
            "hidden": hidden,
            "layers": int(c.get("num_hidden_layers") or 32),
            "inter": int(c.get("intermediate_size") or 4 * hidden),
            "vocab": int(c.get("vocab_size") or 32000),
            "kv_heads": int(c.get("num_key_value_heads") or heads),
            "head_dim": int(c.get("head_dim") or max(1, hidden // heads)),
        }

    def _weight_gb(self) -> float:
        d = self._dims()
        params = 2 * d["vocab"] * d["hidden"] + d["layers"] * (
            4 * d["hidden"] ** 2 + 3 * d["hidden"] * d["inter"]
        )
        return min(params * 2 / self.tp_size / 1e9, self.avail_gb * 0.8)

    def _kv_bytes_per_token(self) -> int:
        d = self._dims()
        kv_heads = max(1, d["kv_heads"] // self.tp_size)
        return 2 * d["layers"] * kv_heads * d["head_dim"] * 2
