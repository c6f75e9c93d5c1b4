"""The process group of a multi-node start (--nnodes > 1), as torch.distributed shows it.

SGLang 0.5.23 hands --dist-init-addr to torch as `tcp://HOST:PORT`: the scheduler of global rank
0 (TP0 on --node-rank 0) hosts torch's TCPStore on PORT (all interfaces) and waits for every
other rank to connect; every other scheduler connects to HOST:PORT, retrying until the timeout.
Without --dist-init-addr each node uses its own `<--host>:<random port>`, so the ranks never
meet and rank 0 times out. Afterwards the ranks talk over gloo's CPU group (SGLang broadcasts
every scheduler step over it), so a rank that dies is noticed by the others at their next
collective; rank 0's ShutdownReq reaches the other ranks the same way.

Here one TCP connection per non-zero rank to rank 0 stands for all of that:
  join      rank 0 waits (timeout + 1 s, as torch does) for world_size - 1 hellos; a connection
            that closes or says something else is a port probe and is dropped, as TCPStore
            drops an unvalidated client;
  barrier   the collectives of start-up (after loading, after CUDA graph capture);
  serve     after ready: rank 0 broadcasts "shutdown" on the launcher's ShutdownReq (never on
            SIGTERM, which kills a scheduler); a lost connection is gloo's error on the side
            that is left.
Errors carry torch's classes and wording, captured from torch 2.13 (tests/unit/captured/).
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Optional

HELLO = "sglang-standin-dist"
SETTLE_S = 0.05  # a peer lost while rank 0 itself stops is part of the stop


class DistStoreError(RuntimeError):
    """torch.distributed.DistStoreError"""


class DistNetworkError(RuntimeError):
    """torch.distributed.DistNetworkError"""


DistStoreError.__module__ = DistNetworkError.__module__ = "torch.distributed"

_GLOO = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:%d] "
_GLHF = " Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f"


def peer_closed(ip: str, port: int) -> RuntimeError:
    """What rank 0 raises when a peer died (the peer's socket closed)."""
    return RuntimeError(
        _GLOO % 553 + f"Connection closed by peer [{ip}]:{port}. This is typically "
        "caused by a remote worker crashing." + _GLHF
    )


def read_reset(ip: str, port: int) -> RuntimeError:
    """What a non-zero rank raises when rank 0 went away without a ShutdownReq."""
    return RuntimeError(
        _GLOO % 537 + f"Read error [{ip}]:{port}: Connection reset by peer. This is "
        "typically caused by a remote worker hanging or bugs in the application." + _GLHF
    )


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class _Lines:
    """Newline-delimited messages on one socket (None: the peer closed)."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def fileno(self):
        return self.sock.fileno()

    def pending(self) -> bool:
        return b"\n" in self.buf

    def feed(self) -> bool:
        """Read what is there; False when the peer closed."""
        try:
            data = self.sock.recv(4096)
        except (ConnectionResetError, OSError):
            return False
        self.buf += data
        return bool(data)

    def pop(self) -> Optional[str]:
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")

    def send(self, text: str) -> None:
        try:
            self.sock.sendall(text.encode() + b"\n")
        except OSError:
            pass  # the reader side finds out


class Master:
    """Rank 0: the store, the barriers, the shutdown broadcast."""

    def __init__(self, port: int, world_size: int, timeout: float):
        self.port, self.world_size, self.timeout = port, world_size, timeout
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("", port))
        except OSError:
            self.listener.close()
            raise DistNetworkError(
                f"The server socket has failed to listen on any local network address. port: {port}, "
                "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
            )
        self.listener.listen(64)
        self.peers: dict[int, tuple[_Lines, tuple[str, int]]] = {}
        self.wake_r, self.wake_w = os.pipe()
        self.stopping = False

    def join(self) -> None:
        deadline = time.monotonic() + self.timeout + 1  # torch waits a second longer than asked
        pending: dict[_Lines, tuple[str, int]] = {}
        while len(self.peers) < self.world_size - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistStoreError(
                    f"Timed out after {int(self.timeout) + 1} seconds waiting for clients. "
                    f"{1 + len(self.peers)}/{self.world_size} clients joined."
                )
            ready, _, _ = select.select([self.listener, *pending], [], [], min(left, 0.2))
            for item in ready:
                if item is self.listener:
                    conn, addr = self.listener.accept()
                    pending[_Lines(conn)] = addr[:2]
                    continue
                alive = item.feed()
                if item.pending():
                    rank = self._hello_rank(item.pop())
                    if rank is not None and rank not in self.peers:
                        self.peers[rank] = (item, pending.pop(item))
                        continue
                    # Not a rank of this group: dropped (a rank sees its connection close).
                    pending.pop(item)
                    item.sock.close()
                elif not alive:  # a port probe: connected and left
                    pending.pop(item)
                    item.sock.close()
        for conn in pending:
            conn.sock.close()
        self._release()

    def _hello_rank(self, line: str) -> Optional[int]:
        try:
            msg = json.loads(line)
        except ValueError:
            return None
        rank = msg.get("rank") if isinstance(msg, dict) and msg.get("hello") == HELLO else None
        return rank if isinstance(rank, int) and 0 < rank < self.world_size else None

    def _release(self) -> None:
        for conn, _ in self.peers.values():
            conn.send("go")

    def barrier(self) -> None:
        """Every peer reached the same point; a lost peer raises gloo's error."""
        waiting = {conn: addr for conn, addr in self.peers.values()}
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [])
            for conn in ready:
                if not conn.pending() and not conn.feed():
                    raise peer_closed(*waiting[conn])
                if conn.pending():
                    conn.pop()
                    waiting.pop(conn)
        self._release()

    def request_shutdown(self) -> None:
        """The launcher's ShutdownReq reached this rank (any thread): serve() broadcasts it.
        SIGTERM is no such request: SGLang's schedulers keep its default action and die."""
        self.stopping = True
        os.write(self.wake_w, b"x")

    def serve(self) -> None:
        """After ready: until a ShutdownReq (broadcast "shutdown", return) or a lost peer (raise)."""
        conns = {conn: addr for conn, addr in self.peers.values()}
        while True:
            ready, _, _ = select.select([self.wake_r, *conns], [], [])
            if self.wake_r in ready:
                break
            for conn in ready:
                if conn.feed():
                    conn.buf = b""  # peers say nothing after start-up
                    continue
                time.sleep(SETTLE_S)
                if self.stopping:
                    break
                raise peer_closed(*conns[conn])
            if self.stopping:
                break
        for conn in conns:
            conn.send("shutdown")  # the ShutdownReq broadcast
            conn.sock.close()


class Client:
    """A non-zero rank: connects to rank 0, follows its barriers and its shutdown."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout: float):
        self.addr = (host, port)
        deadline = time.monotonic() + timeout
        sock = None
        while sock is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistNetworkError(
                    f"The client socket has timed out after {int(timeout * 1000)}ms while trying to "
                    f"connect to ({host}, {port})."
                )
            try:
                sock = socket.create_connection(self.addr, timeout=min(left, 5.0))
            except OSError:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        sock.settimeout(None)
        self.conn = _Lines(sock)
        self.conn.send(json.dumps({"hello": HELLO, "rank": rank, "world_size": world_size}))
        self._expect("go")

    def _next(self) -> Optional[str]:
        while not self.conn.pending():
            if not self.conn.feed():
                return None
        return self.conn.pop()

    def _expect(self, word: str) -> None:
        if self._next() != word:
            raise read_reset(*self.addr)

    def join(self) -> None:
        pass  # the constructor joined

    def barrier(self) -> None:
        self.conn.send("barrier")
        self._expect("go")

    def serve(self) -> None:
        """Until rank 0's shutdown broadcast (return) or its loss (raise)."""
        self._expect("shutdown")


def join_group(init_addr: str, rank: int, world_size: int, timeout: float):
    """Rank 0 hosts at init_addr's port and waits for the others; every other rank connects to
    init_addr. Blocks until all met. init_addr is --dist-init-addr, else the node's own
    `<--host>:<random port>`, which no other node knows: the ranks never meet, as in SGLang."""
    host, port = split_addr(init_addr)
    if rank == 0:
        group = Master(port, world_size, timeout)
        group.join()
        return group
    return Client(host, port, rank, world_size, timeout)
