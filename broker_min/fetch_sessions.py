"""KIP-227 incremental fetch sessions: the broker remembers what a consumer fetches.

A client that fetches many partitions sends its whole partition list once
(session epoch 0) and gets a session id; later requests (epoch 1, 2, ...) carry
only the partitions whose fetch offset or size changed, plus the ones to
forget, and the response carries only the partitions with something new:
records, an error, or a changed high watermark, last stable offset or log start
offset. The session keeps each partition's fetch position and the values it
last sent.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's
default: 1,000). When it is full, a new session evicts the least recently used
one (Kafka's policy also weighs partition counts; LRU is the simple, documented
choice here); the evicted client's next incremental request gets
FETCH_SESSION_ID_NOT_FOUND and starts a new session.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["FetchSession", "FetchSessionCache", "SessionPartition"]

#: Session epochs: -1 ends a session (or asks for none), 0 starts one, 1.. continue it.
FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: where the client fetches, and what the broker last told it."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def changed(self, high_watermark: int, last_stable_offset: int, log_start_offset: int) -> bool:
        """Whether these values differ from the last sent ones (which they then replace)."""
        same = (
            self.high_watermark == high_watermark
            and self.last_stable_offset == last_stable_offset
            and self.log_start_offset == log_start_offset
        )
        self.high_watermark, self.last_stable_offset, self.log_start_offset = (
            high_watermark, last_stable_offset, log_start_offset
        )  # fmt: skip
        return not same


@dataclass(slots=True)
class FetchSession:
    """A client's session: its partitions in fetch order and the epoch its next request must carry."""

    session_id: int
    epoch: int = 1
    partitions: OrderedDict[tuple[str, int], SessionPartition] = field(default_factory=OrderedDict)
    last_used: float = field(default_factory=time.monotonic)

    def upsert(self, topic: str, partition: int, fetch_offset: int, max_bytes: int) -> None:
        key = (topic, partition)
        known = self.partitions.get(key)
        if known is None:
            self.partitions[key] = SessionPartition(topic, partition, fetch_offset, max_bytes)
        else:
            known.fetch_offset, known.max_bytes = fetch_offset, max_bytes

    def forget(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)

    def rotate(self, served: list[tuple[str, int]]) -> None:
        """Move partitions that just returned records to the back, so the next request's byte
        limit favours the others (as Kafka's session does)."""
        for key in served:
            if key in self.partitions:
                self.partitions.move_to_end(key)


class FetchSessionCache:
    """The broker's sessions, at most ``slots`` of them, least recently used evicted first."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> FetchSession | None:
        """A new, empty session (None when sessions are disabled: zero slots)."""
        if self.slots <= 0:
            return None
        while len(self._sessions) >= self.slots:
            self._sessions.popitem(last=False)
            self.evictions += 1
        session_id = random.randint(1, 2**31 - 1)
        while session_id in self._sessions:
            session_id = random.randint(1, 2**31 - 1)
        session = self._sessions[session_id] = FetchSession(session_id)
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = time.monotonic()
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)
