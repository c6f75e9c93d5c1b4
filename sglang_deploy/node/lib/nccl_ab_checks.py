"""What the NCCL A/B sweep (nccl_ab.py) checks on the node before it measures: the GPUs
nvidia-smi lists, what the engine's interpreter sees (torch, CUDA, NCCL), whether the server's
unit holds the GPUs. Standard library only."""

import json
import shutil
import subprocess


def gpu_count():
    """GPUs nvidia-smi lists, or None where it is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        done = subprocess.run(
            [exe, "-L"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


def torch_probe(python, env):
    """(cuda devices, versions text) from the engine's interpreter; (None, why) if unusable."""
    code = (
        "import torch, json; v = torch.cuda.nccl.version() if torch.cuda.is_available() else None; "
        "print(json.dumps([torch.cuda.device_count() if torch.cuda.is_available() else 0, "
        "torch.__version__, torch.version.cuda, '.'.join(map(str, v)) if isinstance(v, tuple) else v]))"
    )
    try:
        done = subprocess.run(
            [python, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=180,
            env=env,
        )
    except OSError as exc:
        return None, "cannot run %s: %s" % (python, exc)
    except subprocess.TimeoutExpired:
        return None, "%s: importing torch timed out" % python
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return None, "torch is not importable by %s (%s)" % (python, last)
    try:
        count, torch_v, cuda_v, nccl_v = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "unexpected answer from %s: %r" % (python, done.stdout[-200:])
    return count, "torch %s, CUDA %s, NCCL %s" % (torch_v, cuda_v, nccl_v)


def unit_active(unit):
    if not unit or not shutil.which("systemctl"):
        return False
    done = subprocess.run(["systemctl", "is-active", "--quiet", unit])
    return done.returncode == 0
