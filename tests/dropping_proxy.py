"""A TCP proxy on loopback that loses one reply: a connection reset after the server ran
the request, as a load balancer, a NAT timeout or a failover makes one.

`DroppingProxy` forwards every connection to a server; once `arm`-ed with a byte
pattern, the connection whose request holds it forwards that request whole, lets the
server answer all of it (its replies stop coming for `QUIET` seconds) and closes both
sides, so the client never reads a byte of the reply.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

#: How long the server sends nothing before a lost reply counts as whole.
QUIET = 0.2


class DroppingProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:*target_port*; `dropped` counts lost replies."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.dropped = 0
        self._pattern: bytes | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, pattern: bytes) -> None:
        """Lose the reply to the next request that holds *pattern*."""
        with self._lock:
            self._pattern = pattern

    def close(self) -> None:
        with self._lock:
            sockets = [self._listener, *self._sockets]
        for sock in sockets:
            _close(sock)

    def __enter__(self) -> DroppingProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, server]
            losing = threading.Event()
            threading.Thread(
                target=self._requests, args=(client, server, losing), daemon=True
            ).start()
            threading.Thread(
                target=self._replies, args=(server, client, losing), daemon=True
            ).start()

    def _requests(
        self, client: socket.socket, server: socket.socket, losing: threading.Event
    ) -> None:
        tail = b""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with self._lock:
                    # the tail: a pattern split between two reads is still found
                    if self._pattern is not None and self._pattern in tail + data:
                        self._pattern = None
                        self.dropped += 1
                        losing.set()
                tail = data[-64:]
                server.sendall(data)

    def _replies(
        self, server: socket.socket, client: socket.socket, losing: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if losing.is_set():
                    # The client waits for this reply, so it sends nothing more: once the
                    # server is quiet, it has run every command of the request.
                    server.settimeout(QUIET)
                    continue
                client.sendall(data)
        _close(client)
        _close(server)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
