"""The detokenizer subprocess: titled sglang::detokenizer, lives as long as the launcher."""

from __future__ import annotations

import signal
import threading

from setproctitle import setproctitle

from sglang.srt.sandbox.proctitle import kill_itself_when_parent_died
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import configure_logger


def run_detokenizer_process(server_args: ServerArgs) -> None:
    setproctitle("sglang::detokenizer")
    kill_itself_when_parent_died()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logger()
    threading.Event().wait()
