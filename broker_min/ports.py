"""Free TCP ports for brokers that bind them later: local clusters and test fixtures.

A port chosen now is bound later by another process, and until then any process can take it.
Outgoing connections take their local ports from the OS's ephemeral range
(``net.ipv4.ip_local_port_range``), and so does ``bind(port 0)``, which soon hands a released
port out again. So the ports are chosen at random below that range, where only a process
asking for that very port takes one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_ports"]

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Below this, ports are left to the system's own services.
_LOWEST = 10000
_TRIES = 200


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free now (each was bound, then released)."""
    low = _ephemeral_low()
    chosen: list[socket.socket] = []
    try:
        if low - _LOWEST >= 1000:
            for port in random.sample(range(_LOWEST, low), min(_TRIES, low - _LOWEST)):
                if len(chosen) == count:
                    break
                taken = _bound(host, port)
                if taken is not None:
                    chosen.append(taken)
        while len(chosen) < count:  # no room below the ephemeral range: let the OS pick
            fallback = _bound(host, 0)
            if fallback is not None:
                chosen.append(fallback)
        return [int(s.getsockname()[1]) for s in chosen]
    finally:
        for s in chosen:
            s.close()


def _bound(host: str, port: int) -> socket.socket | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
    except OSError:
        s.close()
        return None
    return s


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # unknown (not Linux): bind to port 0
