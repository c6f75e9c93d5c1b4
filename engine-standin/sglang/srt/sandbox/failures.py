"""Failure injection (SGLANG_STANDIN_FAIL): the errors real SGLang start-ups die of.

Each failure is raised as a genuine exception inside the scheduler's start-up, so the
scheduler prints a genuine Python traceback through SGLang's "Scheduler hit an exception:"
path. The exception classes carry the module names of the libraries that raise them in real
life, so the last line of the traceback reads exactly like theirs, e.g.
`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`.

Which rank fails: crash-load, cuda-oom and nccl-error hit the first local rank; hang stops
every rank; scheduler-dies-after-ready kills the second local rank (the only one with TP 1).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Optional

from sglang.srt.sandbox import nccl_info


class SafetensorError(Exception):
    """What safetensors raises for a truncated or corrupt shard."""


SafetensorError.__module__ = "safetensors_rust"


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (torch >= 2.5 names it at top level)."""


OutOfMemoryError.__module__ = "torch"


class DistBackendError(RuntimeError):
    """torch.distributed.DistBackendError, raised by ProcessGroupNCCL."""


DistBackendError.__module__ = "torch.distributed"


def failing_local_index(fail: Optional[str], num_local_ranks: int) -> Optional[int]:
    """Index (among this node's schedulers) of the scheduler that fails, or None."""
    if fail in ("crash-load", "cuda-oom", "nccl-error"):
        return 0
    if fail == "scheduler-dies-after-ready":
        return 1 if num_local_ranks > 1 else 0
    return None


def sleep_then(fail_after: float) -> None:
    """Wait until the failure is due (relative to the start of its phase)."""
    if fail_after > 0:
        time.sleep(fail_after)


def crash_load(model_path: str) -> None:
    raise SafetensorError("Error while deserializing header: MetadataIncompleteBuffer")


def cuda_oom(gpu_id: int, total_gib: float) -> None:
    free = 1.17
    in_use = total_gib - free
    raise OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu_id} has a total capacity of "
        f"{total_gib:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, this "
        f"process has {in_use:.2f} GiB memory in use. Of the allocated memory {in_use - 2.60:.2f} GiB "
        "is allocated by PyTorch, and 1.48 GiB is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def nccl_error(gpu_id: int) -> None:
    peer = "10.0.0.2<43229>"
    nccl_info.emit(
        nccl_info.warn_line(
            os.environ,
            gpu_id,
            "misc/socket.cc:484",
            f"socketStartConnect: Connect to {peer} failed : Software caused connection abort",
        )
    )
    raise DistBackendError(
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled "
        f"system error (run with NCCL_DEBUG=INFO for details), NCCL version {nccl_info.NCCL_VERSION}\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
        "device error. \nLast error:\n"
        f"socketStartConnect: Connect to {peer} failed : Software caused connection abort"
    )


def hang_forever() -> None:
    """Loading that never finishes: no more log lines, the port stays closed."""
    threading.Event().wait()


def die_like_oom_killer() -> None:
    """A scheduler that vanishes without a word, as under the kernel's OOM killer."""
    os.kill(os.getpid(), signal.SIGKILL)
