"""A/B all-reduce sweep on this node: NCCL's defaults (a) against the profile's env file (b).

    python3 nccl_ab.py --env-file /etc/sglang/sglang.env --python /opt/sglang/venv/bin/python \
        --nprocs 8 [--unit sglang.service] [--stop-server --lock /run/sglang-deploy/sglang.lock]
        [--ablate] [--rounds 3]

One process per GPU (torch.distributed, NCCL backend), started with the engine's own
interpreter, so its torch and its NCCL are measured. Both arms get the same sizes and process
layout; rounds interleave the arms (a b, b a, a b, ...) so drift (clocks, heat, neighbours)
falls on both. Per size: median time per all-reduce over the rounds, bus bandwidth
(nccl-tests' definition: size / time * 2(n-1)/n), and b/a. With --ablate, each tuning
variable is also removed from (b) in turn, which shows what that one variable does.

Both arms hold NCCL_CUMEM_ENABLE=0 and NCCL_NVLS_ENABLE=0 fixed, as SGLang's launcher sets
them for its workers; NVLink multicast (NVLS) therefore stays off, which some machines require.

Standard library only, except the worker (--worker), which imports torch lazily: the
argument handling, statistics, verdicts and result JSON import without torch.
The last output line is one JSON object: {"status", "cause", "details"}.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

if __package__:
    from . import lock
    from .lib import status
    from .lib.allreduce_stats import (
        DEFAULT_SIZES,
        HELD_FIXED,
        arm_environments,
        build_report,
        parse_env_file,
        parse_size,
        parse_worker_output,
        result_line,
        round_orders,
        size_label,
        summarize,
        table,
        tuning_of,
    )
    from .lib.nccl_ab_checks import gpu_count, torch_probe, unit_active
else:  # run as a script: our scripts' directory is on sys.path
    import lock
    from lib import status
    from lib.allreduce_stats import (
        DEFAULT_SIZES,
        HELD_FIXED,
        arm_environments,
        build_report,
        parse_env_file,
        parse_size,
        parse_worker_output,
        result_line,
        round_orders,
        size_label,
        summarize,
        table,
        tuning_of,
    )
    from lib.nccl_ab_checks import gpu_count, torch_probe, unit_active

MEASURED = "measured"
NO_GPU = "no-gpu"
SERVER_RUNNING = "server-running"
FAILED = "failed"
LOCKED = "locked"

# Exit statuses of this script (status.py).
EXIT = {
    MEASURED: status.READY,
    NO_GPU: status.NO_GPU,
    SERVER_RUNNING: status.GPUS_BUSY,
    FAILED: status.MEASUREMENT_FAILED,
    LOCKED: status.LOCKED,
}


# ----------------------------------------------------------------------- running


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_arm(args, env, world, timeout):
    """One launch of the sweep: world processes; rank 0's timings (max over ranks) or an error."""
    port = free_port()
    procs = []
    for rank in range(world):
        penv = dict(
            env,
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        argv = [
            args.python,
            os.path.abspath(__file__),
            "--worker",
            "--sizes",
            ",".join(map(str, args.sizes)),
            "--iters-us",
            str(args.iters_us),
            "--dtype",
            args.dtype,
        ]
        procs.append(
            subprocess.Popen(
                argv,
                env=penv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                universal_newlines=True,
                start_new_session=True,
            )
        )
    outputs, deadline, failed = [], time.monotonic() + timeout, None
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            failed = failed or "rank %d timed out after %ds" % (rank, timeout)
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
            out, _ = proc.communicate()
        outputs.append(out)
        if proc.returncode != 0 and not failed:
            tail = " | ".join(out.strip().splitlines()[-3:])
            failed = "rank %d exited %s: %s" % (rank, proc.returncode, tail)
    if failed:
        return None, failed
    parsed = parse_worker_output(outputs[0])
    if not parsed:
        return None, "rank 0 printed no result: %s" % outputs[0][-300:]
    return parsed["times_us"], None


def measure(args, arms, world):
    names = [name for name, _ in arms]
    envs = dict(arms)
    samples = {name: [] for name in names}
    for order in round_orders(names, args.rounds):
        for name in order:
            times, error = run_arm(args, envs[name], world, args.timeout)
            if error:
                return None, "arm %s: %s" % (name, error)
            samples[name].append(times)
            print(
                "round %d arm %s: %s"
                % (
                    len(samples[name]),
                    name,
                    " ".join("%s=%.1fus" % (size_label(s), t) for s, t in sorted(times.items())),
                ),
                flush=True,
            )
    return samples, None


def worker(args):
    """One rank: all-reduce each size; prints {'times_us': {size: us}, 'mode': ...} where us is
    the largest mean time per all-reduce over the ranks (a loop of plain calls timed with CUDA
    events: for small messages it includes the launch cost, in both arms alike)."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    dtype = getattr(torch, args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    times, mode = {}, "eager"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000.0

    for size in args.sizes:
        x = torch.zeros(max(1, size // elem), dtype=dtype, device=device)  # zeros: sums stay finite
        for _ in range(5):
            dist.all_reduce(x)
        guess = torch.tensor([timed(lambda: dist.all_reduce(x))], device=device)  # noqa: B023 (called at once)
        dist.all_reduce(guess, op=dist.ReduceOp.MAX)
        iters = int(min(2000, max(20, args.iters_us / max(guess.item(), 1.0))))

        def eager():  # run within this iteration only
            for _ in range(iters):  # noqa: B023
                dist.all_reduce(x)  # noqa: B023

        run = eager
        run()
        samples = sorted(timed(run) / iters for _ in range(3))
        t = torch.tensor([samples[1]], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times[size] = t.item()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"times_us": times, "mode": mode}), flush=True)
    return 0


def finish(status, cause, details, lines=()):
    for line in lines:
        print(line)
    if status in (NO_GPU, SERVER_RUNNING, FAILED, LOCKED):
        print("nccl-ab: %s: %s" % (status, cause), file=sys.stderr)
    print(result_line(status, cause, details), flush=True)
    return EXIT[status]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-file", help="the profile's env file (b); without it only NCCL's defaults exist")
    p.add_argument(
        "--python", default=sys.executable, help="the engine venv's interpreter (its torch and NCCL)"
    )
    p.add_argument("--nprocs", type=int, help="ranks (the tensor-parallel size); default: every visible GPU")
    p.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="message sizes in bytes (4K, 1M allowed), comma-separated",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per arm (median over them)")
    p.add_argument("--iters-us", type=float, default=20000, help="timed work per size and launch, in us")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument(
        "--control",
        action="store_true",
        help="A/A control: (b) gets NCCL's defaults too; any 'effect' is the harness's noise",
    )
    p.add_argument("--ablate", action="store_true", help="also (b) without each tuning variable in turn")
    p.add_argument("--unit", help="the server's systemd unit: refuse while it is active")
    p.add_argument(
        "--stop-server",
        action="store_true",
        help="stop --unit first, holding the node's deploy lock (--lock) from before the stop to the "
        "end (a deploy starts it again)",
    )
    p.add_argument("--lock", help="the service's deploy lock (node/lock.py); required with --stop-server")
    p.add_argument("--lock-wait", type=float, default=600.0, help="seconds to wait for the deploy lock")
    p.add_argument("--lock-holder", default="nccl-ab", help="who holds the lock, shown to whoever waits")
    p.add_argument("--cycles-dir", help="the service's detached restart cycles, waited for with the lock")
    p.add_argument("--timeout", type=int, default=300, help="seconds per launch of the ranks")
    p.add_argument("--host-label", default=socket.gethostname())
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.sizes = sorted({parse_size(s) for s in str(args.sizes).split(",") if s.strip()})
    except ValueError:
        p.error("--sizes: expected sizes like 4096,64K,16M")
    if args.worker:
        return worker(args)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.stop_server and not args.lock:
        p.error("--stop-server needs --lock: a deploy's restart must not meet a stop under its gate")

    details = {
        "host": args.host_label,
        "python": args.python,
        "rounds": args.rounds,
        "sizes": args.sizes,
        "dtype": args.dtype,
        "timing": "eager calls, CUDA events",
    }
    env_file_vars = {}
    if args.env_file:
        try:
            with open(args.env_file) as f:
                env_file_vars = parse_env_file(f.read())
        except OSError as exc:
            return finish(FAILED, "cannot read the env file %s: %s" % (args.env_file, exc.strerror), details)
    details["env_file"] = args.env_file

    # No GPU first: on a node without one, nothing here can be measured, server or not.
    smi = gpu_count()
    base_env = dict(os.environ)
    count, versions = torch_probe(args.python, dict(base_env, **HELD_FIXED))
    if not smi and not count:
        why = "nvidia-smi %s" % ("lists no GPU" if smi == 0 else "not found or failed")
        if count is None:
            why += "; " + versions
        return finish(NO_GPU, "no GPU: %s; nothing measured" % why, details)
    if count is None:
        return finish(NO_GPU, "no GPU usable by the engine: %s; nothing measured" % versions, details)
    if not count:
        return finish(
            NO_GPU, "no GPU: torch in %s sees no CUDA device; nothing measured" % args.python, details
        )
    world = args.nprocs or count
    if world > count:
        return finish(FAILED, "%d ranks asked, torch sees %d GPU(s)" % (world, count), details)
    # Stopping the server is a deploy's business: held under the node's deploy lock (and after
    # any restart cycle still running), so no restart cycle's gate meets a stop it did not make.
    held = None
    if args.stop_server:
        try:
            held = lock.acquire(args.lock, args.lock_wait, args.lock_holder, args.cycles_dir)
        except OSError as exc:  # not root: a deploy's lock (and the stop) are root's
            return finish(FAILED, "cannot take the deploy lock %s: %s" % (args.lock, exc.strerror), details)
        if held is None:
            return finish(
                LOCKED, "the deploy lock %s is held (see above): nothing stopped" % args.lock, details
            )
    try:
        return sweep(args, details, env_file_vars, base_env, versions, world)
    finally:
        if held is not None:
            lock.release(held)


def sweep(args, details, env_file_vars, base_env, versions, world):
    """The server stopped where asked (or a refusal while it runs), then the interleaved arms."""
    if args.unit and unit_active(args.unit):
        if not args.stop_server:
            return finish(
                SERVER_RUNNING,
                "%s is active and holds the GPUs; measuring now would disturb it "
                "and be disturbed (pass --stop-server to stop it first)" % args.unit,
                details,
            )
        banner = "!" * 72
        print(
            "\n".join(
                [
                    banner,
                    "STOPPING %s on %s to measure NCCL (--stop-server)." % (args.unit, args.host_label),
                    "It stays STOPPED afterwards: a deploy (make deploy) will start it again.",
                    banner,
                ]
            ),
            flush=True,
        )
        done = subprocess.run(["systemctl", "stop", args.unit])
        if done.returncode != 0:
            return finish(
                FAILED, "systemctl stop %s failed (exit %d)" % (args.unit, done.returncode), details
            )
        details["stopped_server"] = args.unit

    details["versions"] = versions
    arms = arm_environments(base_env, env_file_vars, ablate=args.ablate)
    tuning = tuning_of(env_file_vars)
    if args.control:
        arms, tuning = [("a", arms[0][1]), ("b", dict(arms[0][1]))], {}
        details["control"] = "A/A: both arms NCCL's defaults"
    print(
        "nccl-ab on %s: %d rank(s), %s; a = defaults, b = %s"
        % (args.host_label, world, versions, " ".join("%s=%s" % kv for kv in tuning.items()) or "(none)"),
        flush=True,
    )
    samples, error = measure(args, arms, world)
    if error:
        return finish(FAILED, error, details)
    stats = summarize(samples, world)
    ablated = [name for name, _ in arms if name.startswith("b-")]
    details = build_report(stats, world, tuning, details, ablated)
    return finish(MEASURED, details["overall"], details, table(details))


if __name__ == "__main__":
    sys.exit(main())
