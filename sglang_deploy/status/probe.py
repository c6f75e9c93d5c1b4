"""The round trips of `make status`: one SSH command per host, every host at once (a thread per
host: each waits on its own ssh process). An answer is the script's result line
(node/lib/result.py), or why there is none, said so that an operator can act on it."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sglang_deploy.node.lib import result

SSH_FAILED = 255  # ssh's own exit status: it could not connect or log in
MAX_AT_ONCE = 256  # ssh processes in flight (each is a thread waiting on its process)


@dataclass(frozen=True)
class Answer:
    found: dict | None = None  # the result line
    error: str | None = None  # why there is no usable result line
    seconds: float = 0.0

    @property
    def answered(self) -> bool:
        return self.found is not None and self.error is None


def _last_line(text) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def answer_of(returncode, stdout, stderr, seconds=0.0) -> Answer:
    """What one host's round trip gave (pure: the tests feed it what ssh prints)."""
    found = result.parse((stdout or "").splitlines())
    if found is not None:
        if found.get("status") == 0:
            return Answer(found, None, seconds)
        return Answer(found, f"{found.get('result', 'failed')}: {found.get('cause')}", seconds)
    said = _last_line(stderr)
    if returncode == SSH_FAILED:
        why = f"unreachable: {said or 'ssh failed'}"
    elif "can't open file" in said or "No such file" in said:
        why = "no node_status.py on the host (a deploy of this version uploads it)"
    elif "a password is required" in said or "sudo:" in said:
        why = f"sudo refused: {said}"
    else:
        why = f"no result line (exit {returncode}){': ' + said if said else ''}"
    return Answer(None, why, seconds)


def ask(argv, timeout) -> Answer:
    started = time.monotonic()
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Answer(None, f"unreachable: no answer within {timeout:g}s", time.monotonic() - started)
    except OSError as exc:
        return Answer(None, f"unreachable: {argv[0]}: {exc.strerror or exc}", time.monotonic() - started)
    return answer_of(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def ask_all(targets, timeout=15.0, runner=ask) -> tuple[list, dict]:
    """(the targets, {target name: Answer}): each target asked as soon as ``targets`` (an
    iterable) yields it, all of them at once; one that could not be planned is answered with
    its reason, unasked."""
    found, futures, answers = [], {}, {}
    with ThreadPoolExecutor(max_workers=MAX_AT_ONCE) as pool:
        for target in targets:
            found.append(target)
            if target.argv:
                futures[target.name] = pool.submit(runner, list(target.argv), timeout)
            else:
                answers[target.name] = Answer(None, target.error or "not planned")
        answers.update({name: future.result() for name, future in futures.items()})
    return found, answers
