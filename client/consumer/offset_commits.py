"""A group's offsets: OffsetCommit, OffsetFetch and auto-commit.

:class:`OffsetCommits` commits offsets for a generation and member id the
membership protocol gives it (or for no member at all, outside group
management), retrying what is retriable for ``default_api_timeout_ms``, and
reads committed offsets back. What an OffsetCommit error says about the
membership (rebalancing, generation over, fenced) it hands to the protocol
through :class:`CommitListener`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kafkakit.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    for_code,
)
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, TopicPartition

from .coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_MOVED,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSTABLE_OFFSET_COMMIT,
    CoordinatorConnection,
)
from .group_config import GroupConfig

if TYPE_CHECKING:
    from .instrumentation import GroupMetrics

log = logging.getLogger("kafkakit.consumer.group")  # one log for the group, whichever module writes


class CommitListener(Protocol):
    """What a membership protocol does when OffsetCommit says its membership changed."""

    def request_rejoin(self, reason: str) -> None:
        """REBALANCE_IN_PROGRESS: the group is rebalancing."""

    def reset_generation(self, *, reset_member_id: bool, reason: str) -> None:
        """ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: this member's generation is over."""

    def fenced(self, api: str) -> FencedInstanceIdError:
        """The error FENCED_INSTANCE_ID from ``api`` raises."""
        ...

    def set_fatal(self, exc: KafkaError) -> None:
        """End the membership for good with ``exc``."""


class OffsetCommits:
    """Offset commits and lookups of one group member, and its auto-commit bookkeeping."""

    def __init__(self, config: GroupConfig, coordinator: CoordinatorConnection, member: CommitListener) -> None:
        self._config = config
        self._coordinator = coordinator
        self._member = member
        self._backoff = config.retry_backoff_ms / 1000
        self._api_timeout = config.api_timeout
        self._last_committed: dict[TopicPartition, int] = {}
        #: When the next auto-commit is due (time.monotonic()).
        self.next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000
        #: The consumer's coordinator metrics (None: off).
        self.metrics: GroupMetrics | None = None

    # -- auto-commit ------------------------------------------------------------

    def auto_commit_due(self) -> bool:
        """Whether an auto-commit is due now; if so, the next one is scheduled."""
        if not self._config.enable_auto_commit or time.monotonic() < self.next_auto_commit:
            return False
        self.next_auto_commit = time.monotonic() + self._config.auto_commit_interval_ms / 1000
        return True

    async def auto_commit(
        self, positions: Mapping[TopicPartition, OffsetAndMetadata], generation: int, member: str
    ) -> None:
        """Commit the positions that changed since the last commit, logging a failure."""
        changed = {tp: om for tp, om in positions.items() if self._last_committed.get(tp) != om.offset}
        if changed:
            await self.commit_quietly(changed, generation, member)

    async def commit_quietly(
        self, positions: Mapping[TopicPartition, OffsetAndMetadata], generation: int, member: str
    ) -> None:
        try:
            await self.commit_offsets(positions, generation, member)
        except KafkaError as exc:
            log.warning("group %s: auto-commit of %s failed: %s", self._config.group_id, dict(positions), exc)

    # -- OffsetCommit -------------------------------------------------------------

    async def commit_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], generation: int, member: str
    ) -> None:
        if not offsets:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": om.offset,
                    "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                    "committed_metadata": om.metadata,
                }
            )
        started = time.monotonic()
        deadline = started + self._api_timeout
        while True:
            try:
                response = await self._coordinator.send(
                    ApiKey.OFFSET_COMMIT,
                    group_id=self._config.group_id,
                    generation_id_or_member_epoch=generation,
                    member_id=member,
                    group_instance_id=self._config.group_instance_id if member else None,
                    retention_time=-1,
                    topics=[{"name": name, "partitions": parts} for name, parts in topics.items()],
                )
                code = _first_partition_error(response.topics)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                code, last = -2, exc
            if code == 0:
                for tp, om in offsets.items():
                    self._last_committed[tp] = om.offset
                if self.metrics is not None:
                    self.metrics.committed(started)
                return
            if code != -2:
                last = for_code(code)("OffsetCommit")
                self._raise_commit_error(code)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"OffsetCommit for group {self._config.group_id!r} timed out: {last}"
                ) from last
            await asyncio.sleep(self._backoff)

    def _raise_commit_error(self, code: int) -> None:
        """Raise the error the application sees for OffsetCommit ``code``; return for retriable ones."""
        if code in COORDINATOR_MOVED:
            self._coordinator.drop(f"OffsetCommit: error {code}")
            return
        if code in (COORDINATOR_LOAD_IN_PROGRESS, UNSTABLE_OFFSET_COMMIT) or for_code(code).retriable:
            return
        if code == REBALANCE_IN_PROGRESS:
            self._member.request_rejoin("OffsetCommit: the group is rebalancing")
            raise RebalanceInProgressError(
                "the group started rebalancing; commit the partitions you give up in on_partitions_revoked"
            )
        if code in (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
            self._member.reset_generation(reset_member_id=True, reason="OffsetCommit")
            raise CommitFailedError(
                f"OffsetCommit rejected ({for_code(code)()}): this member's generation is over; "
                "its partitions may belong to another member now"
            )
        if code == FENCED_INSTANCE_ID:
            error = self._member.fenced("OffsetCommit")
            self._member.set_fatal(error)
            raise error
        raise for_code(code)(f"OffsetCommit for group {self._config.group_id!r}")

    # -- OffsetFetch --------------------------------------------------------------

    async def fetch_committed(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (with metadata) of ``partitions``; partitions without one are left out."""
        if not partitions:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + self._api_timeout
        last: BaseException | None = None
        while True:
            try:
                response = await self._coordinator.send(
                    ApiKey.OFFSET_FETCH,
                    group_id=self._config.group_id,
                    topics=[{"name": n, "partition_indexes": p} for n, p in topics.items()],
                    require_stable=True,
                )
                result = self._committed_from(response)
                if result is not None:
                    return result
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"OffsetFetch for group {self._config.group_id!r} timed out: {last}"
                ) from last
            await asyncio.sleep(self._backoff)

    def _committed_from(self, response: Any) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """Parse OffsetFetch; None when a retriable error asks for another try."""
        codes = [int(getattr(response, "error_code", 0))]
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in response.topics:
            for p in topic.partitions:
                code = int(p.error_code)
                if code == UNKNOWN_TOPIC_OR_PARTITION:
                    continue  # no offset for a topic the group never committed (Java skips it too)
                codes.append(code)
                offset = int(p.committed_offset)
                if not code and offset >= 0:
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    result[TopicPartition(topic.name, int(p.partition_index))] = OffsetAndMetadata(
                        offset, p.metadata or "", epoch if epoch >= 0 else None
                    )
        for code in codes:
            if not code:
                continue
            if code in COORDINATOR_MOVED:
                self._coordinator.drop(f"OffsetFetch: error {code}")
                return None
            if code in (COORDINATOR_LOAD_IN_PROGRESS, UNSTABLE_OFFSET_COMMIT) or for_code(code).retriable:
                return None
            raise for_code(code)(f"OffsetFetch for group {self._config.group_id!r}")
        return result


def _first_partition_error(topics: Iterable[Any]) -> int:
    for topic in topics:
        for p in topic.partitions:
            if int(p.error_code):
                return int(p.error_code)
    return 0
