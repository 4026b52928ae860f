"""Keyed one-shot timers on the event loop, as Kafka's coordinators keep them (``CoordinatorTimer``).

Scheduling a key replaces its pending timer; a timer that fires is forgotten before its
action runs, and an action that raises is logged, never propagated into the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kafkakit.broker.groups")

TimerKey = tuple[str, ...]


class Timers:
    """One ``loop.call_later`` handle per key."""

    def __init__(self) -> None:
        self._handles: dict[TimerKey, asyncio.TimerHandle] = {}

    def schedule(self, key: TimerKey, delay_ms: int, action: Callable[..., None], *args: Any) -> None:
        """Run ``action(*args)`` in ``delay_ms`` (replacing ``key``'s pending timer)."""
        self.cancel(key)
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(delay_ms, 0) / 1000, self._fire, key, action, args)

    def _fire(self, key: TimerKey, action: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._handles.pop(key, None)
        try:
            action(*args)
        except Exception:
            log.exception("coordinator timer %s failed", key)

    def cancel(self, key: TimerKey) -> None:
        """Drop ``key``'s pending timer, if any."""
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_matching(self, position: int, value: str) -> None:
        """Drop every timer whose key has ``value`` at ``position`` (e.g. all of one group's)."""
        for key in [k for k in self._handles if len(k) > position and k[position] == value]:
            self.cancel(key)

    def cancel_all(self) -> None:
        """Drop every pending timer."""
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
