"""The client's half of a KIP-227 fetch session with one broker.

The first Fetch to a broker carries every partition fetched there (epoch 0) and
the broker answers with a session id. Each later Fetch (epoch 1, 2, ...) carries
only the partitions whose fetch offset or size changed since the broker last
heard of them, and forgets the ones not fetched this round (paused, unassigned,
moved to another leader, or with enough data buffered), as the Java client's
FetchSessionHandler does: a partition left in the session would be fetched
from its stale remembered offset. The broker answers with only the partitions
that have something new, which is what makes a consumer of thousands of quiet
partitions cheap on both sides.

Any error (an unknown session, a wrong epoch, another top-level error, a lost
connection) drops the session; the next Fetch is a full one and opens a new
session. Unless the broker said it has no such session, that full Fetch also
names the old one (session id, epoch 0), so the broker frees its slot instead of
keeping it until its cache evicts it. A broker may answer a full Fetch with
session id 0 (it keeps no session: its cache is full or disabled) or end a
session by answering an incremental one with session id 0; either way the next
Fetch is full again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from kafkakit.cluster import ClusterMetadata
from kafkakit.structs import TopicPartition

__all__ = [
    "FetchEntry",
    "FetchSessionHandler",
    "SessionRequest",
    "SessionStats",
    "fetch_topics",
    "fetch_version",
    "forgotten_topics",
    "response_topic_name",
    "topic_ids",
]

#: One partition of a Fetch: (partition, fetch offset, max bytes, current leader epoch).
FetchEntry: TypeAlias = tuple[TopicPartition, int, int, int]

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
#: Fetch error codes that mean "start a new session".
FETCH_SESSION_TOPIC_ID_ERROR = 106  # a session's requests switched between topic names and ids
SESSION_ERRORS = frozenset({FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR})
#: Fetch v13 names topics by id (KIP-516); v16 adds new-leader hints (KIP-951).
TOPIC_ID_VERSION = 13
#: Fetch v7 added sessions.
FIRST_SESSION_VERSION = 7


@dataclass
class SessionStats:
    """What the consumer's fetch sessions did (diagnostics: ``Consumer.fetch_session_stats()``)."""

    requests: int = 0
    full_requests: int = 0
    incremental_requests: int = 0
    partitions_sent: int = 0
    session_resets: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class SessionRequest:
    """One Fetch's session fields and partition lists."""

    session_id: int
    epoch: int
    partitions: list[FetchEntry]  # (partition, fetch offset, max bytes, current leader epoch) to send
    forgotten: list[TopicPartition] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.epoch <= 0


class FetchSessionHandler:
    """Builds the next Fetch of one broker's session and follows the broker's answers."""

    def __init__(self, stats: SessionStats) -> None:
        self.session_id = 0
        self.epoch = 0  # the epoch of the next request: 0 opens a session
        self._close_id = 0  # a session the broker may still hold; the next full Fetch closes it
        self._sent: dict[TopicPartition, tuple[int, int, int]] = {}  # what the broker's session holds
        self._stats = stats

    def next_request(self, wanted: dict[TopicPartition, tuple[int, int, int]]) -> SessionRequest:
        """The request fetching ``wanted`` (partition -> (fetch offset, max bytes, leader epoch)) this round.

        A partition whose leader epoch changed is sent again, as one whose offset or size did.
        """
        if not self.session_id:
            everything = [(tp, *entry) for tp, entry in wanted.items()]
            request = SessionRequest(self._close_id, 0, everything)
        else:
            sent = self._sent
            changed = [(tp, *entry) for tp, entry in wanted.items() if sent.get(tp) != entry]
            forgotten = [tp for tp in sent if tp not in wanted]
            request = SessionRequest(self.session_id, self.epoch, changed, forgotten)
        stats = self._stats
        stats.requests += 1
        stats.partitions_sent += len(request.partitions)
        if request.full:
            stats.full_requests += 1
        else:
            stats.incremental_requests += 1
        return request

    def on_response(self, request: SessionRequest, error_code: int, session_id: int) -> None:
        """Follow the broker's answer to ``request`` (call :meth:`reset` when it failed outright)."""
        if error_code:
            # As the Java client: the broker has no such session (70), or it may hold one that is
            # out of step with ours (a wrong epoch, any other top-level error): close it, start anew.
            self.reset(close=error_code != FETCH_SESSION_ID_NOT_FOUND)
            return
        if request.full:
            self.session_id = session_id  # 0: the broker keeps no session for us; the next one asks again
            self.epoch = 1
            self._close_id = 0  # a full Fetch naming an old session closed it
            self._sent = {tp: (offset, size, epoch) for tp, offset, size, epoch in request.partitions}
            return
        if not session_id:  # the broker ended the session (Kafka does when it holds no partition)
            self.reset(close=False)
            return
        self.epoch = self.epoch + 1 if self.epoch < 2**31 - 1 else 1
        for tp in request.forgotten:
            self._sent.pop(tp, None)
        for tp, offset, size, epoch in request.partitions:
            self._sent[tp] = (offset, size, epoch)

    def reset(self, *, close: bool = True) -> None:
        """Forget the session (the broker's is gone, or may be): the next Fetch is full, and names
        the old session for the broker to close when ``close`` (it may still hold it)."""
        if self.session_id:
            self._stats.session_resets += 1
            if close:
                self._close_id = self.session_id
        self.session_id = 0
        self.epoch = 0
        self._sent = {}


def topic_ids(metadata: ClusterMetadata, names: Iterable[str]) -> dict[str, uuid.UUID] | None:
    """The ids of ``names`` from metadata, or None when one is unknown (then Fetch must name topics)."""
    ids: dict[str, uuid.UUID] = {}
    for name in names:
        topic = metadata.topics.get(name)
        topic_id = None if topic is None else topic.topic_id
        if not isinstance(topic_id, uuid.UUID) or topic_id.int == 0:
            return None
        ids[name] = topic_id
    return ids


def fetch_version(negotiated: int, ids: dict[str, uuid.UUID] | None) -> int:
    """The Fetch version to send: the negotiated one, below topic ids when some id is unknown."""
    return negotiated if ids is not None or negotiated < TOPIC_ID_VERSION else TOPIC_ID_VERSION - 1


def response_topic_name(topic: Any, names_by_id: Mapping[uuid.UUID, str]) -> str | None:
    """A Fetch response topic's name (v13+ answer with the topic id)."""
    name = getattr(topic, "topic", None)
    return name if name is not None else names_by_id.get(topic.topic_id)


def fetch_topics(partitions: list[FetchEntry], ids: Mapping[str, uuid.UUID] | None = None) -> list[dict[str, Any]]:
    """A Fetch request's ``topics`` for (partition, fetch offset, max bytes, leader epoch) entries.

    Both the name and the id are given: the request class of the version keeps the one it has.
    """
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, offset, max_bytes, leader_epoch in partitions:
        topics.setdefault(tp.topic, []).append(
            {
                "partition": tp.partition,
                "current_leader_epoch": leader_epoch,  # KIP-320: the broker fences a stale view
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": max_bytes,
            }
        )
    return [{"topic": name, "topic_id": _id(ids, name), "partitions": parts} for name, parts in topics.items()]


def forgotten_topics(partitions: list[TopicPartition], ids: Mapping[str, uuid.UUID] | None = None) -> list[dict[str, Any]]:
    """A Fetch request's ``forgotten_topics_data`` for these partitions."""
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": name, "topic_id": _id(ids, name), "partitions": parts} for name, parts in topics.items()]


def _id(ids: Mapping[str, uuid.UUID] | None, name: str) -> uuid.UUID:
    return ids[name] if ids is not None else uuid.UUID(int=0)
