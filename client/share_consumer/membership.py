"""Share-group membership: the ShareGroupHeartbeat loop (KIP-932, API key 76).

A share consumer names its own member id (a UUID kept for its lifetime), joins
with epoch 0, and heartbeats at the interval the coordinator answers with. The
coordinator answers with the member epoch and, when it changed, the member's
assignment: topic ids and partitions, which several members of the group may
share. There is no revocation step: the new assignment simply replaces the old
one. Leaving sends epoch -1.

Errors: UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH rejoin with epoch 0 (as Java's
client does); a coordinator that moved is looked up again; a broker without
share groups, an authorization failure or a group id held by another group type
is fatal and raised by the consumer's next call.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.consumer.coordinator import CoordinatorConnection
from kafkakit.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ShareGroupsNotSupportedError,
    for_code,
)
from kafkakit.protocol.build import millis
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import TopicPartition

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
_UNKNOWN_MEMBER_ID = 25
_FENCED_MEMBER_EPOCH = 110
_UNSUPPORTED_VERSION = 35
_COORDINATOR_RETRY = {14, 15, 16}  # load in progress, not available, not coordinator
_FATAL = {
    23: "the group id is used by a group of another type (a consumer or streams group)",
    24: "the group id is not valid",
    29: "not authorized to read a subscribed topic",
    30: "not authorized to join the group",
    81: "the group is full (group.share.max.size)",
}


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """The share consumer's group settings, validated (what the coordinator connection needs too)."""

    group_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    default_api_timeout_ms: int
    rack_id: str | None = None

    @property
    def api_timeout(self) -> float:
        return max(self.default_api_timeout_ms, self.request_timeout_ms) / 1000


def not_supported(what: str) -> ShareGroupsNotSupportedError:
    return ShareGroupsNotSupportedError(
        f"{what}: the broker does not support share groups (KIP-932: Apache Kafka 4.0 or later "
        "with the share.version feature enabled)"
    )


class ShareMembership:
    """This consumer's membership of one share group, kept alive by a background heartbeat task."""

    def __init__(
        self,
        cluster: Cluster,
        settings: ShareGroupSettings,
        on_assignment: Callable[[frozenset[TopicPartition]], None],
    ) -> None:
        self._cluster = cluster
        self._settings = settings
        self._on_assignment = on_assignment
        self.coordinator = CoordinatorConnection(cluster, settings)
        #: The member id: chosen by the client and kept for the consumer's lifetime.
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.subscription: tuple[str, ...] = ()
        self.assignment: frozenset[TopicPartition] = frozenset()
        self._target: Any = None  # the last assignment answered, by topic id (names may not be known yet)
        self.fatal_error: KafkaError | None = None
        self._interval = 1.0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._joined = asyncio.Event()
        self._send_subscription = True

    @property
    def group_id(self) -> str:
        return self._settings.group_id

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def subscribe(self, topics: tuple[str, ...]) -> None:
        """Change the subscription; the next heartbeat (sent now) carries it."""
        if topics != self.subscription:
            self.subscription = topics
            self._send_subscription = True
            self._wakeup.set()

    async def wait_joined(self, timeout: float) -> None:
        """Wait until the coordinator answered the first heartbeat (or ``timeout``)."""
        try:
            async with asyncio.timeout(timeout):
                await self._joined.wait()
        except TimeoutError:
            pass

    async def _run(self) -> None:
        while True:
            if not self.subscription:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            delay = self._interval
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                log.info("share group %s: heartbeat failed: %s", self.group_id, exc)
                delay = self._settings.retry_backoff_ms / 1000
            except KafkaError as exc:
                if exc.retriable:
                    delay = self._settings.retry_backoff_ms / 1000
                else:
                    self._fail(exc)
                    return
            except Exception as exc:  # a bug must not end heartbeats silently
                log.exception("share group %s: heartbeat failed", self.group_id)
                self._fail(KafkaError(f"share group heartbeat failed: {exc!r}"))
                return
            self._wakeup.clear()
            try:
                async with asyncio.timeout(delay):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def _fail(self, error: KafkaError) -> None:
        log.error("share group %s: %s", self.group_id, error)
        self.fatal_error = error
        self._joined.set()

    async def _heartbeat(self) -> None:
        conn = await self.coordinator.connection()
        if not conn.supports(ApiKey.SHARE_GROUP_HEARTBEAT):
            raise not_supported(f"share group {self.group_id!r}")
        send_topics = self._send_subscription or self.member_epoch == 0
        response = await self.coordinator.send(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            rack_id=self._settings.rack_id,
            subscribed_topic_names=list(self.subscription) if send_topics else None,
        )
        log.debug("share group %s: heartbeat answer %s", self.group_id, response)
        code = int(response.error_code)
        if code:
            self._handle_error(code, response.error_message)
            return
        self._send_subscription = False
        self.member_epoch = int(response.member_epoch)
        interval = millis(response.heartbeat_interval)
        if interval > 0:
            self._interval = interval / 1000
        if response.assignment is not None:
            self._target = response.assignment
        if self._target is not None:
            await self._apply_target()
        self._joined.set()

    def _handle_error(self, code: int, message: str | None) -> None:
        if code in _COORDINATOR_RETRY:
            self.coordinator.drop(f"heartbeat error {code}")
            raise for_code(code)(message or "")
        if code in (_UNKNOWN_MEMBER_ID, _FENCED_MEMBER_EPOCH):
            log.info("share group %s: member %s fenced (error %s); rejoining", self.group_id, self.member_id, code)
            self.member_epoch = 0
            self._target = None
            self._set_assignment(frozenset())
            self._wakeup.set()
            return
        if code == _UNSUPPORTED_VERSION:
            raise not_supported(f"share group {self.group_id!r}")
        error = for_code(code)
        detail = _FATAL.get(code)
        if detail is not None or not error.retriable:
            raise error(f"share group {self.group_id!r}: {message or detail or 'heartbeat refused'}")
        raise error(message or "")

    async def _apply_target(self) -> None:
        """Turn the answered assignment (topic ids) into partitions, refreshing metadata for unknown ids."""
        target = self._target
        names = self._names_by_id()
        missing = [t.topic_id for t in target.topic_partitions if t.topic_id not in names]
        if missing:
            await self._cluster.refresh_metadata(self.subscription)
            names = self._names_by_id()
        partitions: set[TopicPartition] = set()
        for t in target.topic_partitions:
            name = names.get(t.topic_id)
            if name is None:
                continue  # a topic not known yet: the next heartbeat tries again
            partitions.update(TopicPartition(name, int(p)) for p in t.partitions)
        self._set_assignment(frozenset(partitions))

    def _names_by_id(self) -> dict[Any, str]:
        return {meta.topic_id: name for name, meta in self._cluster.metadata.topics.items() if meta.topic_id}

    def _set_assignment(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions != self.assignment:
            log.info("share group %s: assigned %s", self.group_id, sorted(partitions))
            self.assignment = partitions
            self._on_assignment(partitions)

    async def leave(self, timeout: float) -> None:
        """Stop heartbeating and leave the group (epoch -1); best effort within ``timeout``."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.member_epoch <= 0 and not self.assignment:
            return
        try:
            async with asyncio.timeout(timeout):
                await self.coordinator.send(
                    ApiKey.SHARE_GROUP_HEARTBEAT,
                    group_id=self.group_id,
                    member_id=self.member_id,
                    member_epoch=LEAVE_EPOCH,
                    rack_id=None,
                    subscribed_topic_names=None,
                )
        except (KafkaError, TimeoutError) as exc:
            log.info("share group %s: leaving failed: %s", self.group_id, exc)
        self.member_epoch = LEAVE_EPOCH

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        conn = self.coordinator.conn
        if conn is not None:
            await conn.close()
        await asyncio.gather(*self.coordinator.background, return_exceptions=True)
