"""A TCP proxy that damages bytes: put between the host and an emulated board's serial socket.

Every byte, in both directions, is independently dropped, duplicated or corrupted (one random bit
flipped) with the given probabilities, from a seeded generator so a failing run can be replayed.
"""

from __future__ import annotations

import random
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Faults:
    dropped: int = 0
    duplicated: int = 0
    corrupted: int = 0
    passed: int = 0


@dataclass
class LossyProxy:
    target: tuple[str, int]
    p_drop: float = 0.0
    p_dup: float = 0.0
    p_corrupt: float = 0.0
    seed: int = 0
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(1)
        self.port = int(self._server.getsockname()[1])
        self._socks: list[socket.socket] = [self._server]
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    def _damage(self, data: bytes) -> bytes:
        out = bytearray()
        with self._lock:
            for b in data:
                r = self._rng.random()
                if r < self.p_drop:
                    self.faults.dropped += 1
                elif r < self.p_drop + self.p_dup:
                    self.faults.duplicated += 1
                    out += bytes([b, b])
                elif r < self.p_drop + self.p_dup + self.p_corrupt:
                    self.faults.corrupted += 1
                    out.append(b ^ (1 << self._rng.randrange(8)))
                else:
                    self.faults.passed += 1
                    out.append(b)
        return bytes(out)

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except OSError:
            return
        board = socket.create_connection(self.target)
        for s in (client, board):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socks += [client, board]
        for src, dst in ((client, board), (board, client)):
            t = threading.Thread(target=self._pump, args=(src, dst), daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                dst.sendall(self._damage(data))
        except OSError:
            pass
        finally:  # one side closed: close the other, as a pulled cable would
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2)
