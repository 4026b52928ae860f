"""The public share consumer: a member of a KIP-932 share group (queues on Kafka).

In a share group every member may read every partition: the broker hands each
record to one member at a time, locked for it, and the member acknowledges it
(ACCEPT, RELEASE for another delivery, REJECT to archive it) or lets the lock
time out. See docs/groups.md, "Share groups (queues)".
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.config import INT32_MAX, check_int
from kafkakit.errors import ConsumerStoppedError, IllegalStateError, KafkaConfigError
from kafkakit.net.security import OAuthTokenProvider, SecurityConfig
from kafkakit.structs import TopicPartition

from .acknowledgements import (
    AcknowledgementCommitCallback,
    AcknowledgementResult,
    Acknowledgements,
    AcknowledgeType,
    ShareConsumerRecord,
)
from .fetcher import AckResults, ShareFetchConfig, ShareFetcher
from .membership import ShareGroupSettings, ShareMembership

log = logging.getLogger(__name__)

_MODES = ("implicit", "explicit")


class ShareConsumer:
    """An asyncio share-group consumer (KIP-932), in the style of :class:`kafkakit.Consumer`.

    ``share_acknowledgement_mode="implicit"`` (default) accepts every record of a
    ``getmany`` on the next ``getmany`` (or ``commit_sync``/``commit_async``/``stop``);
    ``"explicit"`` requires :meth:`acknowledge` for every record before the next
    ``getmany``, which raises IllegalStateError otherwise (as Java's client does).
    Acknowledgements travel with the next ShareFetch, or at once with ``commit_sync``.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Iterable[str] = "localhost:9092",
        group_id: str,
        client_id: str = "kafkakit",
        share_acknowledgement_mode: str = "implicit",
        acknowledgement_commit_callback: AcknowledgementCommitCallback | None = None,
        key_deserializer: Any = None,
        value_deserializer: Any = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        max_poll_records: int = 500,
        request_timeout_ms: int = 40000,
        default_api_timeout_ms: int = 60000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        client_rack: str | None = None,
        metadata_max_age_ms: int = 300000,
        connections_max_idle_ms: int = 540000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str = "PLAIN",
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: OAuthTokenProvider | None = None,
        sasl_oauth_extensions: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise KafkaConfigError("group_id", f"a share consumer needs a non-empty group_id, got {group_id!r}")
        if share_acknowledgement_mode not in _MODES:
            raise KafkaConfigError(
                "share_acknowledgement_mode", f"must be one of {_MODES}, got {share_acknowledgement_mode!r}"
            )
        for name, des in (("key_deserializer", key_deserializer), ("value_deserializer", value_deserializer)):
            if des is not None and not callable(des):
                raise KafkaConfigError(name, f"must be callable or None, got {des!r}")
        if acknowledgement_commit_callback is not None and not callable(acknowledgement_commit_callback):
            raise KafkaConfigError("acknowledgement_commit_callback", "must be callable or None")
        fetch_max_wait_ms = check_int("fetch_max_wait_ms", fetch_max_wait_ms, 0, INT32_MAX)
        request_timeout_ms = check_int("request_timeout_ms", request_timeout_ms, 1, INT32_MAX)
        if request_timeout_ms <= fetch_max_wait_ms:
            raise KafkaConfigError("request_timeout_ms", "must be larger than fetch_max_wait_ms")
        retry_backoff_ms = check_int("retry_backoff_ms", retry_backoff_ms, 0, INT32_MAX)
        self._explicit = share_acknowledgement_mode == "explicit"
        self._callback = acknowledgement_commit_callback
        self._max_poll_records = check_int("max_poll_records", max_poll_records, 1, INT32_MAX)
        self._request_timeout = request_timeout_ms / 1000
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            connections_max_idle_ms=check_int("connections_max_idle_ms", connections_max_idle_ms, 1, INT32_MAX),
            metadata_max_age_ms=check_int("metadata_max_age_ms", metadata_max_age_ms, 0, INT32_MAX),
            retry_backoff_ms=retry_backoff_ms,
            allow_auto_create_topics=False,
            security=SecurityConfig(
                security_protocol=security_protocol,
                ssl_context=ssl_context,
                sasl_mechanism=sasl_mechanism,
                sasl_plain_username=sasl_plain_username,
                sasl_plain_password=sasl_plain_password,
                sasl_oauth_token_provider=sasl_oauth_token_provider,
                sasl_oauth_extensions=sasl_oauth_extensions or {},
            ),
        )
        settings = ShareGroupSettings(
            group_id=group_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            default_api_timeout_ms=check_int("default_api_timeout_ms", default_api_timeout_ms, 1, INT32_MAX),
            rack_id=client_rack,
        )
        self._membership = ShareMembership(self._cluster, settings, self._assigned)
        self._fetcher = ShareFetcher(
            self._cluster,
            ShareFetchConfig(
                max_wait_ms=fetch_max_wait_ms,
                min_bytes=check_int("fetch_min_bytes", fetch_min_bytes, 0, INT32_MAX),
                max_bytes=check_int("fetch_max_bytes", fetch_max_bytes, 1, INT32_MAX),
                max_records=self._max_poll_records,
                request_timeout=request_timeout_ms / 1000,
                retry_backoff=retry_backoff_ms / 1000,
                check_crcs=bool(check_crcs),
                key_deserializer=key_deserializer,
                value_deserializer=value_deserializer,
            ),
            group_id,
            lambda: self._membership.member_id,
            self._results,
        )
        #: Records handed out and not finally acknowledged yet: partition -> offset -> record.
        self._delivered: dict[TopicPartition, dict[int, ShareConsumerRecord]] = {}
        #: Acknowledgements made with acknowledge() since the last poll or commit.
        self._acked: dict[TopicPartition, Acknowledgements] = {}
        self._renewed: set[tuple[TopicPartition, int]] = set()
        self._commits: set[asyncio.Task[Any]] = set()
        self._iterating: list[ShareConsumerRecord] = []
        self._started = False
        self._closed = False
        if topics:
            self.subscribe(topics)

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and join the group (once subscribed)."""
        if self._closed:
            raise IllegalStateError("a stopped share consumer cannot be restarted")
        if self._started:
            return
        await self._cluster.start()
        self._started = True
        self._membership.start()

    async def stop(self, timeout: float = 30.0) -> None:
        """Acknowledge (implicit mode: accept the last records handed out), close the share sessions,
        which releases every record still held, and leave the group."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            await self._cluster.close()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            self._fetcher.queue(self._take_acknowledgements(finishing=True))
            if self._commits:
                await asyncio.wait(set(self._commits), timeout=max(deadline - loop.time(), 0))
            await self._fetcher.close(max(deadline - loop.time(), 0.1))
            await self._membership.leave(max(deadline - loop.time(), 0.1))
        finally:
            await self._membership.close()
            await self._cluster.close()

    async def __aenter__(self) -> ShareConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _check_running(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the share consumer was stopped")
        if not self._started:
            raise IllegalStateError("the share consumer is not started (call start() or use 'async with')")

    # -- group -------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Read ``topics`` (a list of names; replaces the previous subscription)."""
        if isinstance(topics, str):
            raise TypeError("subscribe() takes a list of topic names, not a string")
        names = tuple(sorted(set(topics)))
        if not all(isinstance(t, str) and t for t in names):
            raise TypeError("subscribe() takes a list of non-empty topic names")
        if self._closed:
            raise ConsumerStoppedError("the share consumer was stopped")
        self._cluster.wanted_topics.update(names)
        self._membership.subscribe(names)

    def unsubscribe(self) -> None:
        """Stop reading every topic (the member stays in the group until stop())."""
        self._membership.subscribe(())

    def subscription(self) -> set[str]:
        return set(self._membership.subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions the group coordinator assigned to this member (shared with other members)."""
        return set(self._membership.assignment)

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    def _assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._fetcher.assignment = partitions
        self._cluster.wanted_topics.update(tp.topic for tp in partitions)

    # -- acknowledgements --------------------------------------------------

    def acknowledge(self, record: ShareConsumerRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge ``record`` (explicit mode): ACCEPT, RELEASE, REJECT, or RENEW its lock.

        Sent with the next ``getmany``'s ShareFetch, or by ``commit_sync``/``commit_async``.
        Raises IllegalStateError in implicit mode, or for a record not delivered to this
        consumer or already acknowledged.
        """
        self._check_running()
        if not self._explicit:
            raise IllegalStateError(
                "acknowledge() needs share_acknowledgement_mode='explicit' (implicit mode accepts every "
                "record on the next getmany)"
            )
        ack_type = AcknowledgeType(type)
        tp = TopicPartition(record.topic, record.partition)
        held = self._delivered.get(tp)
        if held is None or record.offset not in held:
            raise IllegalStateError(
                f"record {record.topic}-{record.partition}@{record.offset} is not held by this consumer "
                "(not delivered to it, or already acknowledged)"
            )
        self._acked.setdefault(tp, Acknowledgements()).add(record.offset, ack_type)
        if ack_type == AcknowledgeType.RENEW:
            self._renewed.add((tp, record.offset))  # still held: acknowledge it again when done
        else:
            self._renewed.discard((tp, record.offset))
            del held[record.offset]
            if not held:
                del self._delivered[tp]

    def _take_acknowledgements(self, *, finishing: bool = False) -> dict[TopicPartition, Acknowledgements]:
        """The acknowledgements to send now; implicit mode accepts every record handed out."""
        acks, self._acked = self._acked, {}
        if not self._explicit:
            for tp, held in self._delivered.items():
                a = acks.setdefault(tp, Acknowledgements())
                for offset in held:
                    a.add(offset, AcknowledgeType.ACCEPT)
            self._delivered.clear()
        elif finishing:
            self._delivered.clear()  # what was not acknowledged is released when the session closes
        return acks

    def _check_acknowledged(self) -> None:
        if not self._explicit:
            return
        waiting = [
            f"{tp.topic}-{tp.partition}@{offset}"
            for tp, held in self._delivered.items()
            for offset in held
            if (tp, offset) not in self._renewed
        ]
        if waiting:
            shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
            raise IllegalStateError(
                f"explicit acknowledgement mode: acknowledge every record before the next getmany "
                f"({len(waiting)} not acknowledged: {shown})"
            )

    def _results(self, results: AckResults) -> None:
        if self._callback is None:
            return
        try:
            outcome = self._callback(results)
            if asyncio.iscoroutine(outcome):
                task = asyncio.ensure_future(outcome)
                self._commits.add(task)
                task.add_done_callback(self._commits.discard)
        except Exception:
            log.exception("acknowledgement commit callback failed")

    async def commit_sync(self, timeout_ms: int | None = None) -> dict[TopicPartition, AcknowledgementResult]:
        """Send the acknowledgements made so far (implicit mode: accept every record handed out)
        in ShareAcknowledge requests and wait for the result of each partition."""
        self._check_running()
        self._fetcher.queue(self._take_acknowledgements())
        timeout = self._request_timeout if timeout_ms is None else timeout_ms / 1000
        async with asyncio.timeout(timeout):
            return await self._fetcher.acknowledge()

    def commit_async(self) -> asyncio.Task[dict[TopicPartition, AcknowledgementResult]]:
        """:meth:`commit_sync` in the background: the results go to the acknowledgement commit
        callback (and the returned task)."""
        self._check_running()
        self._fetcher.queue(self._take_acknowledgements())
        task = asyncio.ensure_future(self._fetcher.acknowledge())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)
        return task

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """Called with ``{partition: AcknowledgementResult}`` whenever acknowledgements are answered."""
        self._callback = callback

    # -- reading -----------------------------------------------------------

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        """Acquired records by partition, waiting up to ``timeout_ms`` when none are buffered.

        First the records of the previous call are acknowledged (implicit mode) or checked
        (explicit mode: IllegalStateError when one is not acknowledged).
        """
        self._check_running()
        if max_records is None:
            max_records = self._max_poll_records
        elif max_records < 1:
            raise ValueError(f"max_records must be positive, got {max_records}")
        self._check_acknowledged()
        self._fetcher.queue(self._take_acknowledgements())
        self._iterating = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        fetched = False
        while True:
            self._raise_errors()
            records = self._fetcher.drain(max_records)
            if records:
                for tp, batch in records.items():
                    held = self._delivered.setdefault(tp, {})
                    for record in batch:
                        held[record.offset] = record
                return records
            remaining = deadline - loop.time()
            if remaining <= 0 and fetched:
                return records
            # Starts a ShareFetch (carrying the acknowledgements) to every leader without one in
            # flight, even with no time left: the records it acquires wait for the next call.
            await self._fetcher.fetch(max(remaining, 0.0))
            fetched = True
            if self._closed:
                raise ConsumerStoppedError("the share consumer was stopped")

    def _raise_errors(self) -> None:
        error = self._membership.fatal_error
        if error is not None:
            raise error
        self._fetcher.raise_error()

    async def getone(self) -> ShareConsumerRecord:
        """The next record, waiting as long as it takes (one getmany of one record)."""
        while True:
            records = await self.getmany(timeout_ms=1000, max_records=1)
            for batch in records.values():
                return batch[0]

    def __aiter__(self) -> ShareConsumer:
        return self

    async def __anext__(self) -> ShareConsumerRecord:
        if self._iterating:
            return self._iterating.pop()
        try:
            while True:
                records = await self.getmany(timeout_ms=1000)
                if records:
                    flat = [r for batch in records.values() for r in batch]
                    flat.reverse()
                    self._iterating = flat
                    return self._iterating.pop()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None


__all__ = ["ShareConsumer"]

