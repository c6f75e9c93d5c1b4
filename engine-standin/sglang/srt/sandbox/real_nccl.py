"""Opt-in real NCCL (SGLANG_STANDIN_REAL_NCCL=1) for GPU machines.

Each scheduler joins a torch.distributed NCCL process group (world size = --tp-size), runs
one all-reduce and keeps a little GPU memory allocated while it lives, so that NCCL's own
NCCL_DEBUG=INFO lines, `nvidia-smi` and the deploy's "old PIDs hold no GPU memory" check
see a real worker. torch is imported lazily: the stand-in itself needs only the standard
library, and a missing torch/CUDA with the knob set is a clear start-up error.
"""

from __future__ import annotations

import datetime
import inspect
import logging

logger = logging.getLogger(__name__)

HOLD_BYTES = 256 * 1024 * 1024  # kept allocated on the device while the scheduler lives

_held = []  # references that keep the device memory (and the process group) alive


def _import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise RuntimeError(
            f"SGLANG_STANDIN_REAL_NCCL=1 needs torch with CUDA in this environment, but importing "
            f"torch failed: {e}"
        ) from e
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise RuntimeError(
            "SGLANG_STANDIN_REAL_NCCL=1 needs torch with CUDA, but torch.cuda.is_available() is "
            f"False (torch {torch.__version__}, CUDA build {torch.version.cuda})"
        )
    if not dist.is_nccl_available():
        raise RuntimeError(f"SGLANG_STANDIN_REAL_NCCL=1 but torch {torch.__version__} has no NCCL backend")
    return torch, dist


def init_and_all_reduce(
    rank: int, world_size: int, gpu_id: int, init_addr: str, timeout_s: float = 600.0
) -> dict:
    """Join the NCCL group, all-reduce (rank+1) over all ranks, check the sum.

    Returns {"device": int, "nccl_version": str, "torch_version": str}.
    """
    torch, dist = _import_torch()
    device_index = gpu_id % torch.cuda.device_count()
    torch.cuda.set_device(device_index)
    device = torch.device("cuda", device_index)

    kwargs = {}
    # device_id (torch >= 2.3) makes NCCL create its communicator now, not at first use.
    if "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = device
    dist.init_process_group(
        backend="nccl",
        init_method=f"tcp://{init_addr}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
        **kwargs,
    )

    tensor = torch.full((1024,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(tensor)
    torch.cuda.synchronize(device)
    got = float(tensor[0].item())
    expected = world_size * (world_size + 1) / 2.0
    raw_version = torch.cuda.nccl.version()  # a tuple in recent torch, an int in old ones
    nccl_version = ".".join(map(str, raw_version)) if isinstance(raw_version, tuple) else str(raw_version)
    logger.info(
        f"NCCL all_reduce check: sum={got:.1f}, expected={expected:.1f}, world_size={world_size}, "
        f"device=cuda:{device_index}, nccl={nccl_version}"
    )
    if abs(got - expected) > 1e-3:
        raise RuntimeError(f"NCCL all_reduce returned {got}, expected {expected}")

    _held.append(torch.empty(HOLD_BYTES, dtype=torch.uint8, device=device))
    return {"device": device_index, "nccl_version": nccl_version, "torch_version": torch.__version__}


def device_memory_gib(device_index: int):
    """(free, total) GiB of the device, through torch (only after init_and_all_reduce)."""
    import torch

    free, total = torch.cuda.mem_get_info(device_index)
    return free / 2**30, total / 2**30
