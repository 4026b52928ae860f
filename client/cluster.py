"""Cluster metadata cache, connections by node id, and leader routing.

``Cluster`` is the core every producer/consumer/admin shares: it bootstraps
from a list of addresses, keeps one connection per broker, refreshes metadata
(coalescing concurrent refreshes into one request) and answers "who leads
this partition".
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kafkakit.errors import (
    KafkaConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
    for_code,
)
from kafkakit.metrics import NetworkMetrics
from kafkakit.net.connection import BrokerConnection
from kafkakit.net.sasl import SaslAuthenticator
from kafkakit.net.security import PLAINTEXT, SecurityConfig
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import BrokerInfo, PartitionInfo, TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Partition errors that mean "refresh metadata and retry".
_REFRESH_ERRORS = {3, 5, 6, 74, 75, 76}  # unknown topic, leader n/a, not leader, fenced/unknown leader epoch


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """Parse ``"host:port,host2:port"`` (or a list) into (host, port) pairs."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    result = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        try:
            result.append((host.strip("[]") or "localhost", int(port)))
        except ValueError:
            raise KafkaConfigError("bootstrap_servers", f"bad address {item!r}") from None
    if not result:
        raise KafkaConfigError("bootstrap_servers", "no address given")
    return result


@dataclass
class TopicMetadata:
    name: str
    topic_id: Any
    is_internal: bool
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error_code: int = 0


class ClusterMetadata:
    """An immutable-ish snapshot of brokers and topics, replaced on every refresh."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.updated_at = 0.0

    def leader_for(self, tp: TopicPartition) -> int | None:
        topic = self.topics.get(tp.topic)
        if topic is None:
            return None
        info = topic.partitions.get(tp.partition)
        if info is None or info.leader < 0:
            return None
        return info.leader

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        """What the metadata says of ``tp`` (leader, replicas, leader epoch), if anything."""
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def apply_leader_hint(self, tp: TopicPartition, leader: int, leader_epoch: int, brokers: list[BrokerInfo]) -> bool:
        """KIP-951: take a new leader named in a Produce or Fetch error answer, when it is newer
        than what the metadata knows and its address is known; True when it was taken."""
        topic = self.topics.get(tp.topic)
        info = None if topic is None else topic.partitions.get(tp.partition)
        if topic is None or info is None or leader < 0 or leader_epoch <= info.leader_epoch:
            return False
        for broker in brokers:
            self.brokers[broker.node_id] = broker
        if leader not in self.brokers:
            return False
        topic.partitions[tp.partition] = replace(info, leader=leader, leader_epoch=leader_epoch)
        return True

    def take_leader_hint(self, tp: TopicPartition, partition_result: Any, response: Any) -> bool:
        """:meth:`apply_leader_hint` for a Produce v10+ / Fetch v16+ answer: the partition result's
        ``current_leader`` and the response's ``node_endpoints`` (absent in older versions)."""
        hint = getattr(partition_result, "current_leader", None)
        if hint is None or int(hint.leader_id) < 0:
            return False
        endpoints = [
            BrokerInfo(int(n.node_id), n.host, int(n.port), n.rack) for n in getattr(response, "node_endpoints", ())
        ]
        return self.apply_leader_hint(tp, int(hint.leader_id), int(hint.leader_epoch), endpoints)

    def partitions_for(self, topic: str) -> list[int] | None:
        meta = self.topics.get(topic)
        if meta is None or meta.error_code:
            return None
        return sorted(meta.partitions)

    def update(self, response: Any, requested: set[str] | None) -> None:
        self.cluster_id = getattr(response, "cluster_id", None)
        self.controller_id = int(getattr(response, "controller_id", -1))
        self.brokers = {
            int(b.node_id): BrokerInfo(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None)) for b in response.brokers
        }
        topics = dict(self.topics) if requested is not None else {}
        for t in response.topics:
            if t.name is None:
                continue
            meta = TopicMetadata(t.name, getattr(t, "topic_id", None), bool(getattr(t, "is_internal", False)), error_code=int(t.error_code))
            known = self.topics.get(t.name)
            for p in t.partitions:
                info = PartitionInfo(
                    t.name,
                    int(p.partition_index),
                    int(p.leader_id),
                    tuple(int(r) for r in p.replica_nodes),
                    tuple(int(r) for r in p.isr_nodes),
                    int(getattr(p, "leader_epoch", -1)),
                )
                if known is not None and known.topic_id == meta.topic_id:
                    # KIP-320: a broker that has not caught up yet may answer with an older
                    # leader (a lower leader epoch): keep the newer view, as the Java client does.
                    before = known.partitions.get(info.partition)
                    if before is not None and info.leader_epoch < before.leader_epoch:
                        info = before
                meta.partitions[info.partition] = info
            if meta.error_code and t.name in topics and meta.error_code not in (3,):
                continue  # keep the last good view through a transient error
            topics[t.name] = meta
        self.topics = topics
        self.updated_at = time.monotonic()


class Cluster:
    """Connections to every broker of one cluster plus its metadata."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str = "kafkakit",
        request_timeout_ms: int = 30000,
        connections_max_idle_ms: int = 540000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        allow_auto_create_topics: bool = True,
        security: SecurityConfig = PLAINTEXT,
        network_metrics: NetworkMetrics | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        #: The owning client's connection-layer sensors, given to every connection (None: off).
        self.network_metrics = network_metrics
        # One authenticator for every connection: OAUTHBEARER tokens are fetched once and shared.
        self._authenticator = SaslAuthenticator(security) if security.uses_sasl else None
        self.client_id = client_id
        if request_timeout_ms <= 0:
            raise KafkaConfigError("request_timeout_ms", "must be positive")
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.reconnect_backoff = reconnect_backoff_ms / 1000
        self.reconnect_backoff_max = reconnect_backoff_max_ms / 1000
        self.allow_auto_create_topics = allow_auto_create_topics
        self.metadata = ClusterMetadata()
        self.wanted_topics: set[str] = set()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future[BrokerConnection]] = {}
        self._failures: dict[int, tuple[int, float]] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._refresh: asyncio.Future[None] | None = None
        self._closing: set[asyncio.Future[None]] = set()
        self._closed = False

    async def start(self) -> None:
        """Bootstrap: connect to one of the bootstrap servers and load metadata."""
        await self.refresh_metadata()

    async def close(self) -> None:
        self._closed = True
        conns = list(self._connections.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    # -- connections -------------------------------------------------------

    def _new_connection(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(
            host,
            port,
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            on_close=self._on_connection_closed,
            security=self.security,
            authenticator=self._authenticator,
            metrics=self.network_metrics,
        )

    async def open_connection(
        self, host: str, port: int, *, node_id: int = -1, request_timeout_ms: int | None = None
    ) -> BrokerConnection:
        """A new connected (and authenticated) connection that the caller owns, e.g. to a coordinator."""
        conn = BrokerConnection(
            host,
            port,
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=request_timeout_ms or self.request_timeout_ms,
            security=self.security,
            authenticator=self._authenticator,
            metrics=self.network_metrics,
        )
        await conn.connect()
        return conn

    def _on_connection_closed(self, conn: BrokerConnection) -> None:
        if self._connections.get(conn.node_id) is conn:
            del self._connections[conn.node_id]
            if not self._closed:
                self.request_metadata_update()

    async def connection(self, node_id: int) -> BrokerConnection:
        """A connected connection to broker ``node_id`` (reconnecting with backoff)."""
        conn = self._connections.get(node_id)
        if conn is not None and conn.connected:
            return conn
        pending = self._connecting.get(node_id)
        if pending is None:
            pending = asyncio.ensure_future(self._connect_node(node_id))
            self._connecting[node_id] = pending
            pending.add_done_callback(functools.partial(self._connected, node_id))
        return await asyncio.shield(pending)

    def _connected(self, node_id: int, attempt: asyncio.Future[BrokerConnection]) -> None:
        self._connecting.pop(node_id, None)
        if not attempt.cancelled():
            attempt.exception()  # retrieved: every waiter may have gone (cancelled), yet it failed

    async def _connect_node(self, node_id: int) -> BrokerConnection:
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            await self.refresh_metadata()
            broker = self.metadata.brokers.get(node_id)
            if broker is None:
                raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        failures, last = self._failures.get(node_id, (0, 0.0))
        if failures:
            delay = min(self.reconnect_backoff * (2 ** (failures - 1)), self.reconnect_backoff_max)
            delay *= random.uniform(0.8, 1.2)
            wait = last + delay - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        conn = self._new_connection(broker.host, broker.port, node_id)
        try:
            await conn.connect()
        except KafkaError:
            self._failures[node_id] = (failures + 1, time.monotonic())
            self.request_metadata_update()  # it may be down for good, or back on another address
            raise
        self._failures.pop(node_id, None)
        self._connections[node_id] = conn
        return conn

    async def find_coordinator(
        self,
        key: str,
        key_type: int,
        use: Callable[[Any], Awaitable[T]],
        *,
        what: str,
        timeout: float,
        backoff: float,
    ) -> T:
        """``use(response)`` of a successful FindCoordinator for ``key``, retrying what is retriable.

        Retriable errors, from FindCoordinator or from ``use`` (typically connecting to
        the coordinator it named), are retried every ``backoff`` seconds until ``timeout``
        passes (then :class:`KafkaTimeoutError` with the last one); others raise at once.
        ``what`` names the key in errors, e.g. ``"group 'g'"``.
        """
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            try:
                conn = await self.any_connection()
                response = await conn.call(ApiKey.FIND_COORDINATOR, key=key, key_type=key_type)
                code = int(response.error_code)
                if code == 0:
                    return await use(response)
                error = for_code(code)
                if not error.retriable:
                    raise error(f"FindCoordinator for {what}")
                last = error(getattr(response, "error_message", None) or "")
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"no coordinator found for {what}: {last}") from last
            await asyncio.sleep(backoff)

    async def any_connection(self) -> BrokerConnection:
        """A connection to any live broker (a known one, else a bootstrap server)."""
        for conn in self._connections.values():
            if conn.connected:
                return conn
        node_ids = list(self.metadata.brokers)
        random.shuffle(node_ids)
        # Brokers that just failed go last: trying one first would wait out its reconnect backoff
        # (up to reconnect_backoff_max_ms) before the next broker is even asked.
        node_ids.sort(key=lambda node_id: node_id in self._failures)
        for node_id in node_ids:
            try:
                return await self.connection(node_id)
            except KafkaError:
                continue
        return await self._bootstrap_connection()

    async def _bootstrap_connection(self) -> BrokerConnection:
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        errors = []
        refused: KafkaError | None = None
        addresses = list(self.bootstrap)
        random.shuffle(addresses)
        for host, port in addresses:
            conn = self._new_connection(host, port, -1)
            try:
                await conn.connect()
            except KafkaError as exc:
                errors.append(str(exc))
                if not exc.retriable:
                    refused = exc  # bad credentials or an untrusted broker: another try fails the same way
                continue
            self._bootstrap_conn = conn
            return conn
        if refused is not None:
            raise refused
        raise KafkaConnectionError("cannot reach any bootstrap server: " + "; ".join(errors))

    # -- metadata ------------------------------------------------------------

    def request_metadata_update(self) -> None:
        """Mark metadata stale so the next lookup refreshes it."""
        self.metadata.updated_at = 0.0

    @property
    def metadata_stale(self) -> bool:
        return time.monotonic() - self.metadata.updated_at > self.metadata_max_age

    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> None:
        """Refresh metadata for the wanted topics (plus ``topics``), sharing an in-flight refresh."""
        if topics is not None:
            self.wanted_topics.update(topics)
        if self._refresh is not None and not self._refresh.done():
            await asyncio.shield(self._refresh)
            if topics is None or all(t in self.metadata.topics for t in topics):
                return
        self._refresh = asyncio.ensure_future(self._do_refresh())
        await asyncio.shield(self._refresh)

    async def _do_refresh(self) -> None:
        requested = set(self.wanted_topics)
        timeout = self.request_timeout_ms / 1000
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline and not self._closed:
            try:
                conn = await self.any_connection()
                # A third of the budget per try: a broker that stopped answering (paused, cut
                # off) times out, its connection closes, and the next try asks another one.
                attempt = max(min(timeout / 3, deadline - time.monotonic()), 0.001)
                response = await self._fetch_metadata(conn, requested, attempt)
            except KafkaError as exc:
                if not exc.retriable:
                    raise  # authentication or authorization: retrying would only repeat it
                last_error = exc
                await asyncio.sleep(self.retry_backoff)
                continue
            before = self.metadata.brokers
            self.metadata.update(response, requested)
            self._drop_moved_brokers(before)
            return
        raise KafkaConnectionError(f"metadata refresh failed: {last_error}") from last_error

    def _drop_moved_brokers(self, before: dict[int, BrokerInfo]) -> None:
        """Close connections to brokers whose address changed (one came back on another port)."""
        for node_id, old in before.items():
            new = self.metadata.brokers.get(node_id)
            conn = self._connections.get(node_id)
            if new is not None and conn is not None and (new.host, new.port) != (old.host, old.port):
                log.info("broker %s moved from %s:%s to %s:%s", node_id, old.host, old.port, new.host, new.port)
                del self._connections[node_id]
                self._failures.pop(node_id, None)
                task = asyncio.ensure_future(conn.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def _fetch_metadata(self, conn: BrokerConnection, topics: set[str], timeout: float | None = None) -> Any:
        request = conn.request(
            ApiKey.METADATA,
            topics=[{"name": t, "topic_id": None} for t in sorted(topics)],
            allow_auto_topic_creation=self.allow_auto_create_topics,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return await conn.send(request, timeout=timeout)

    async def fetch_all_topics_metadata(self) -> Any:
        """A Metadata response listing every topic (topics=null); its topics join the cache."""
        conn = await self.any_connection()
        response = await conn.call(
            ApiKey.METADATA,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        self.metadata.update(response, set())  # merged: what the cache knew of other topics stays
        return response

    async def partitions_for(self, topic: str, *, timeout: float | None = None) -> list[int]:
        """Partition numbers of ``topic``, waiting for it to appear (auto-create) up to ``timeout``."""
        parts = self.metadata.partitions_for(topic)
        if parts and topic in self.wanted_topics and not self.metadata_stale:
            return parts
        deadline = time.monotonic() + (self.request_timeout_ms / 1000 if timeout is None else timeout)
        backoff = self.retry_backoff
        while True:
            await self.refresh_metadata([topic])
            meta = self.metadata.topics.get(topic)
            if meta is not None and not meta.error_code and meta.partitions:
                return sorted(meta.partitions)
            if meta is not None and meta.error_code and not for_code(meta.error_code).retriable:
                # e.g. TOPIC_AUTHORIZATION_FAILED: waiting would not change the answer.
                raise for_code(meta.error_code)(f"topic {topic!r}")
            if time.monotonic() >= deadline:
                code = meta.error_code if meta is not None else 3
                raise (for_code(code) if code else UnknownTopicOrPartitionError)(f"topic {topic!r} not available")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def leader_connection(self, tp: TopicPartition) -> BrokerConnection:
        """The connection to the current leader of ``tp`` (refreshing metadata if unknown)."""
        leader = self.metadata.leader_for(tp)
        if leader is None or self.metadata_stale:
            await self.refresh_metadata([tp.topic])
            leader = self.metadata.leader_for(tp)
            if leader is None:
                raise UnknownTopicOrPartitionError(f"no leader for {tp.topic}-{tp.partition}")
        return await self.connection(leader)

    @staticmethod
    def is_refresh_error(code: int) -> bool:
        """Errors after which metadata must be refreshed before retrying."""
        return code in _REFRESH_ERRORS


async def wait_until(deadline: float, what: str) -> None:
    """Raise KafkaTimeoutError when ``deadline`` (monotonic) has passed."""
    if time.monotonic() > deadline:
        raise KafkaTimeoutError(f"timed out {what}")
