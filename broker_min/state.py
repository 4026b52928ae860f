"""Cluster state of the single-node broker: identity, the topic registry, logs, append notifications.

Topics are persisted as one small JSON file per topic under
``<data_dir>/.kafkakit-topics/`` (written to a temporary file, fsynced, then
renamed into place, so a crash leaves either the old or the new file), and the
cluster identity in ``<data_dir>/meta.properties`` as Kafka does.  Handlers
reach everything through :class:`BrokerState`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.coordinators.consumer_group_protocol import ConsumerSettings, TopicsView
from kafkakit.broker.coordinators.group_coordinator import GroupCoordinator, GroupSettings
from kafkakit.broker.coordinators.group_records import partition_for_group
from kafkakit.broker.coordinators.offsets_topic import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS, OffsetsTopic
from kafkakit.broker.coordinators.transactions import (
    TRANSACTION_TOPIC,
    TRANSACTION_TOPIC_CONFIGS,
    TransactionCoordinator,
)
from kafkakit.broker.fetch_sessions import FetchSessionCache
from kafkakit.broker.log import LogConfig, LogError, LogManager, PartitionLog
from kafkakit.broker.log.checkpoint import fsync_path, write_durably
from kafkakit.broker.log.cleaner_task import CleanerConfig, LogCleaner
from kafkakit.broker.metadata import MetadataImage, PartitionRegistration
from kafkakit.broker.producer_state import ProducerIdAllocator, ProducerStateRegistry
from kafkakit.broker.security.authorizer import Authorizer
from kafkakit.broker.security.credentials import ScramCredentialStore
from kafkakit.broker.security.principal import current_session
from kafkakit.errors import KafkaConfigError

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

log = logging.getLogger("kafkakit.broker")

TOPICS_DIR = ".kafkakit-topics"
SECURITY_DIR = ".kafkakit-security"
META_FILE = "meta.properties"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249
# Seconds between scans for transactions past their timeout (Kafka: 10 s; cheap here).
TRANSACTION_TIMEOUT_CHECK_INTERVAL = 1.0
# Seconds between looks for transaction markers due for a retry (each has its own backoff).
TRANSACTION_MARKER_RETRY_INTERVAL = 0.05


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's rules), or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


@dataclass(slots=True)
class TopicInfo:
    """A topic as the registry knows it; ``configs`` holds only the topic's own overrides."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        """Kafka's internal topics (the group, transaction and share coordinators')."""
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict[str, Any]:
        """The persisted form."""
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "num_partitions": self.num_partitions,
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicInfo:
        """Inverse of :meth:`to_json`."""
        return cls(
            name=str(data["name"]),
            topic_id=uuid.UUID(data["topic_id"]),
            num_partitions=int(data["num_partitions"]),
            configs={str(k): str(v) for k, v in data.get("configs", {}).items()},
        )


class TopicRegistry:
    """Name -> :class:`TopicInfo`, persisted one JSON file per topic."""

    def __init__(self, directory: Path | None) -> None:
        """``directory`` None keeps the registry in memory only (cluster mode: the metadata image
        is the record of topics, and the replica manager mirrors it here)."""
        self._dir = directory
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        if directory is None:
            return
        directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(directory.glob("*.json")):
            info = TopicInfo.from_json(json.loads(path.read_text("utf-8")))
            self._index(info)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> TopicInfo | None:
        """The topic called ``name``, if any."""
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with this id, if any."""
        return self._by_id.get(topic_id)

    def add(self, info: TopicInfo) -> None:
        """Persist then index a new topic (replacing one of the same name)."""
        if self._dir is not None:
            write_durably(self._dir / f"{info.name}.json", json.dumps(info.to_json(), indent=1).encode())
        previous = self._by_name.get(info.name)
        if previous is not None:
            self._by_id.pop(previous.topic_id, None)
        self._index(info)

    def remove(self, name: str) -> TopicInfo | None:
        """Forget a topic (file first, so a crash never resurrects a half-deleted one as live)."""
        info = self._by_name.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
            if self._dir is not None:
                with contextlib.suppress(FileNotFoundError):
                    (self._dir / f"{name}.json").unlink()
                fsync_path(self._dir)
        return info

    def _index(self, info: TopicInfo) -> None:
        self._by_name[info.name] = info
        self._by_id[info.topic_id] = info


class BrokerState:
    """Everything handlers share: config, identity, topics, logs and the append notifier."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = data_dir
        self.node_id = config.node_id
        self.cluster_id = _load_or_create_cluster_id(data_dir, config)
        self.advertised_host = config.advertised_host or "127.0.0.1"
        self.port = 0
        self.listener_endpoints: dict[str, tuple[str, int]] = {}
        self.listener_protocols: dict[str, str] = {}
        self.default_log_config = broker_log_config(config)
        # Cluster mode: topics come from the metadata image (the replica manager mirrors them).
        self.topics = TopicRegistry(None if config.cluster_mode else data_dir / TOPICS_DIR)
        self.logs = LogManager(data_dir, self.default_log_config)
        self.cleaner = LogCleaner(
            self.logs,
            CleanerConfig(
                enable=config.log_cleaner_enable,
                backoff_ms=config.log_cleaner_backoff_ms,
                io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
                dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            ),
        )
        self.producer_ids = ProducerIdAllocator(data_dir)
        self.producer_states = ProducerStateRegistry()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.scram_credentials = ScramCredentialStore(data_dir / SECURITY_DIR)
        self.authorizer = Authorizer.from_config(config, data_dir / SECURITY_DIR)
        #: Cluster mode (issue 13): the metadata image this node replays, and the replica manager
        #: that leads and follows partitions by it. Both None on a single node, where this node
        #: leads every partition with replicas = ISR = [node id].
        self.image: MetadataImage | None = None
        self.replicas: ReplicaManagerHook | None = None
        #: Cluster mode: sends a request to the active controller (CreateTopics and friends are
        #: forwarded, as Kafka's brokers do); None on a single node.
        self.controller_channel: ControllerForwarder | None = None
        #: Cluster mode: requests to other brokers' inter-broker listeners (transaction markers,
        #: transaction verification); None on a single node.
        self.inter_broker: BrokerChannel | None = None
        #: Cluster mode: creates ``__consumer_offsets`` / ``__transaction_state`` through the controller.
        self.internal_topic_requester: Callable[[str], None] | None = None
        #: Cluster mode: the active controller's node id, or None while the quorum has no leader.
        self.active_controller: Callable[[], int | None] = lambda: self.node_id
        self._append_waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}
        self._background: list[asyncio.Task[None]] = []
        if not config.cluster_mode:
            self._open_registered_partitions()
        self.groups = GroupCoordinator(
            OffsetsTopic(self, config.offsets_topic_num_partitions, self.producer_states),
            group_settings(config),
        )
        self.groups.topic_lookup = lambda: TopicsView(self.topics)
        if not config.cluster_mode:
            # In cluster mode a coordinator loads a partition when this node becomes its leader.
            self.groups.load()
        self.transactions = TransactionCoordinator(
            self,
            self.producer_ids,
            self.producer_states,
            self.groups,
            # Kafka writes TransactionLogValue v1 once transaction version 2 is finalized.
            log_value_version=1 if config.transaction_version >= 2 else 0,
        )
        if not config.cluster_mode:
            self.transactions.load()

    # -- listener --------------------------------------------------------------

    def set_listener(self, host: str, port: int) -> None:
        """Record where clients reach this broker's one PLAINTEXT listener."""
        self.set_listeners({"PLAINTEXT": (host, port)})

    def set_listeners(self, endpoints: Mapping[str, tuple[str, int]]) -> None:
        """Record where clients reach each listener (Metadata, FindCoordinator and DescribeCluster
        answer with the endpoint of the listener the request came in on, as Kafka does)."""
        self.listener_endpoints = dict(endpoints)
        self.advertised_host, self.port = next(iter(self.listener_endpoints.values()))

    def set_listener_protocols(self, protocols: Mapping[str, str]) -> None:
        """Record each listener's security protocol (a cluster node registers them)."""
        self.listener_protocols = dict(protocols)

    def advertised_endpoint(self) -> tuple[str, int]:
        """(host, port) of the listener the current request came in on."""
        listener = current_session().listener
        return self.listener_endpoints.get(listener, (self.advertised_host, self.port))

    # -- partition leadership (single node or cluster) ---------------------------------

    def partition_registration(self, topic: str, partition: int) -> PartitionRegistration | None:
        """Replicas, ISR, leader and epochs of a partition: from the metadata image in cluster
        mode; on a single node, this node with its log's leader epoch."""
        if self.image is not None:
            return self.image.partition(topic, partition)
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        node = (self.node_id,)
        return PartitionRegistration(node, node, self.node_id, self.leader_epoch(topic, partition), 0)

    def is_local_leader(self, topic: str, partition: int) -> bool:
        """Whether this node leads the partition (and has its log open)."""
        if self.replicas is not None:
            return self.replicas.is_leader(topic, partition)
        return self.partition_log(topic, partition) is not None

    def node_endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where clients reach ``node_id`` on the listener the current request came in on."""
        if self.image is None:
            return self.advertised_endpoint() if node_id == self.node_id else None
        broker = self.image.brokers.get(node_id)
        if broker is None or broker.fenced:
            return None
        endpoint = broker.endpoint(current_session().listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def request_internal_topic(self, topic: str) -> None:
        """Cluster mode: have the controller create an internal topic (FindCoordinator asks for it
        and answers COORDINATOR_NOT_AVAILABLE meanwhile); nothing on a single node."""
        if self.internal_topic_requester is not None:
            self.internal_topic_requester(topic)

    async def wait_for_topics(self, names: Iterable[str], timeout: float) -> bool:
        """Cluster mode: wait until this node's image has every topic in ``names`` (a topic the
        controller just created reaches each node a moment later); True if it did."""
        wanted = set(names)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not wanted <= set(self.topics_names()):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def topics_names(self) -> list[str]:
        """Names of the topics this node knows (the image in cluster mode)."""
        return list(self.image.topics) if self.image is not None else [info.name for info in self.topics]

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout: float) -> ErrorCode | None:
        """Wait until the partition's high watermark reaches ``end_offset`` (acks=all, and the
        coordinators' own writes); None when it did, else the error to answer. Immediate on a
        single node, where the HW is the log end."""
        if self.replicas is None:
            return None
        return await self.replicas.wait_committed(topic, partition, end_offset, timeout)

    # -- authorization -----------------------------------------------------------

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the current request's principal may do ``operation`` on ``resource_type:name``."""
        return self.authorizer is None or self.authorizer.authorize(current_session(), operation, resource_type, name)

    def allowed_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the current principal may do ``operation`` on some resource of ``resource_type``."""
        return self.authorizer is None or self.authorizer.authorize_any(current_session(), operation, resource_type)

    # -- topics ----------------------------------------------------------------

    def topic_log_config(self, info: TopicInfo) -> LogConfig:
        """The effective log settings of a topic: its overrides over the broker's defaults."""
        return LogConfig.from_topic_configs(info.configs, self.default_log_config)

    def create_topic(
        self, name: str, num_partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        """Register a topic and create its partition logs.

        The caller validates name, partition count and configs first (the
        handlers turn problems into error codes); ``LogConfig`` raises
        ``KafkaConfigError`` for bad configs.
        """
        if self.config.cluster_mode:
            # Only the controller creates topics in a cluster (handlers forward the request).
            raise LogError(f"cannot create topic {name} locally in cluster mode")
        info = TopicInfo(name, uuid.uuid4(), num_partitions, dict(configs or {}))
        log_config = self.topic_log_config(info)
        # The registry file is the commit point: after a crash here the next
        # start creates whichever partition logs are missing.
        self.topics.add(info)
        for partition in range(num_partitions):
            self.logs.create(name, partition, log_config)
        log.info("created topic %s with %d partition(s)", name, num_partitions)
        return info

    def delete_topic(self, name: str) -> TopicInfo | None:
        """Remove a topic and its data; fetches waiting on it wake up and see it gone."""
        info = self.topics.remove(name)
        if info is None:
            return None
        self.logs.delete_topic(name)
        self.producer_states.forget_topic(name)
        for partition in range(info.num_partitions):
            self.notify_append(name, partition)
        log.info("deleted topic %s", name)
        return info

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log of ``topic``/``partition`` when both exist."""
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        return self.logs.get(topic, partition)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """This node's leader epoch for the partition (Metadata, ListOffsets, Fetch and
        OffsetForLeaderEpoch agree on it); 0, a new partition's epoch, when its log is not open."""
        log = self.partition_log(topic, partition)
        return log.leader_epoch if log is not None else 0

    def offsets_topic_partitions(self) -> int | None:
        """Partition count of ``__consumer_offsets``, None until the group coordinator first writes."""
        info = self.topics.get(OFFSETS_TOPIC)
        return None if info is None else info.num_partitions

    def offsets_topic_log(self, partition: int) -> PartitionLog:
        """A partition log of ``__consumer_offsets``, creating the internal compacted topic on first use."""
        if OFFSETS_TOPIC not in self.topics:
            self.create_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, OFFSETS_TOPIC_CONFIGS)
        log = self.partition_log(OFFSETS_TOPIC, partition)
        if log is None:
            raise LogError(f"{OFFSETS_TOPIC}-{partition} does not exist")
        return log

    def offsets_partition_for(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition of a group (the topic is created if missing)."""
        partition = self.groups_store_partition(group_id)
        self.offsets_topic_log(partition)
        return OFFSETS_TOPIC, partition

    def groups_store_partition(self, group_id: str) -> int:
        """Kafka's partition rule for groups over the current ``__consumer_offsets`` size."""
        count = self.offsets_topic_partitions() or self.config.offsets_topic_num_partitions
        return partition_for_group(group_id, count)

    def transaction_topic_partitions(self) -> int | None:
        """Partition count of ``__transaction_state``, None before the first transactional id."""
        info = self.topics.get(TRANSACTION_TOPIC)
        return None if info is None else info.num_partitions

    def transaction_topic_log(self, partition: int) -> PartitionLog:
        """A partition log of ``__transaction_state``, creating the internal topic (1 partition) on first use."""
        if TRANSACTION_TOPIC not in self.topics:
            self.create_topic(TRANSACTION_TOPIC, 1, TRANSACTION_TOPIC_CONFIGS)
        found = self.partition_log(TRANSACTION_TOPIC, partition)
        if found is None:
            raise LogError(f"{TRANSACTION_TOPIC}-{partition} does not exist")
        return found

    def _open_registered_partitions(self) -> None:
        for topic, partitions in self.logs.topics().items():
            if topic not in self.topics:
                # Logs without a registry entry (a data dir from elsewhere, or a
                # delete cut short): keep the data and adopt the topic.
                log.warning("adopting topic %s found on disk without a registry entry", topic)
                configs = self.logs.topic_config_overrides(topic)
                self.topics.add(TopicInfo(topic, uuid.uuid4(), max(partitions) + 1, configs))
        for info in self.topics:
            log_config = self.topic_log_config(info)
            for partition in range(info.num_partitions):
                if self.logs.get(info.name, partition) is None:
                    self.logs.create(info.name, partition, log_config)

    # -- long-poll support -----------------------------------------------------

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake every Fetch waiting for data on this partition (call after each append)."""
        waiters = self._append_waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_append(self, partitions: Iterable[tuple[str, int]], timeout: float) -> bool:
        """Wait until one of ``partitions`` gets an append, or ``timeout`` seconds pass; True if woken."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._append_waiters.setdefault(key, set()).add(fut)
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            async with asyncio.timeout(timeout):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._append_waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._append_waiters[key]

    # -- background maintenance ------------------------------------------------

    def start_background_tasks(self) -> None:
        """Start retention enforcement and the time-based flush policy."""
        self._background.append(asyncio.create_task(self._retention_loop(), name="kafkakit-retention"))
        self._background.append(asyncio.create_task(self._flush_loop(), name="kafkakit-flush"))
        if self.cleaner.config.enable:
            self._background.append(asyncio.create_task(self.cleaner.run(), name="kafkakit-log-cleaner"))
        self._background.append(
            asyncio.create_task(self._transaction_timeout_loop(), name="kafkakit-txn-timeouts")
        )

    async def stop_background_tasks(self) -> None:
        """Cancel the maintenance tasks and wait for them."""
        self.groups.shutdown()
        await self.cleaner.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.logs.enforce_retention(_now_ms())
            except Exception:
                log.exception("retention check failed")

    async def _transaction_timeout_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_timeout_check = loop.time() + TRANSACTION_TIMEOUT_CHECK_INTERVAL
        while True:
            await asyncio.sleep(TRANSACTION_MARKER_RETRY_INTERVAL)
            try:
                self.transactions.retry_markers()
            except Exception:
                log.exception("retrying transaction markers failed")
            if loop.time() < next_timeout_check:
                continue
            next_timeout_check = loop.time() + TRANSACTION_TIMEOUT_CHECK_INTERVAL
            try:
                self.transactions.abort_timed_out()
            except Exception:
                log.exception("aborting timed-out transactions failed")

    async def _flush_loop(self) -> None:
        # Topic flush.ms overrides may be shorter than the broker default, so poll
        # at most every second; flush_due() decides which partitions are due.
        interval = min(self.config.log_flush_ms / 1000, 1.0)
        while True:
            await asyncio.sleep(max(interval, 0.01))
            try:
                self.logs.flush_due(_now_ms())
            except Exception:
                log.exception("scheduled flush failed")

    def close(self) -> None:
        """Flush and close every log so the next start needs no recovery."""
        self.logs.close()


class ControllerForwarder(Protocol):
    """The broker's channel to the active controller (kafkakit.broker.controller.channel)."""

    async def send(self, request: Any, timeout: float) -> Any: ...


class BrokerChannel(Protocol):
    """Requests to another broker by node id (kafkakit.broker.coordinators.markers.NodeChannel)."""

    async def send(self, node_id: int, request: Any, timeout: float) -> Any: ...


class ReplicaManagerHook(Protocol):
    """What BrokerState and the handlers ask of the replica manager (kafkakit.broker.replication)."""

    def is_leader(self, topic: str, partition: int) -> bool: ...

    async def wait_committed(
        self, topic: str, partition: int, end_offset: int, timeout: float
    ) -> ErrorCode | None: ...

    def check_produce(self, topic: str, partition: int, acks: int) -> ErrorCode | None: ...

    def on_leader_append(self, topic: str, partition: int) -> None: ...

    def on_follower_fetch(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int
    ) -> ErrorCode | None: ...


def group_settings(config: BrokerConfig) -> GroupSettings:
    """The group coordinator's settings (group.* broker settings)."""
    return GroupSettings(
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        consumer=ConsumerSettings(
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size,
        ),
    )


def broker_log_config(config: BrokerConfig) -> LogConfig:
    """The broker-wide log defaults (log.* settings) as a :class:`LogConfig`."""
    try:
        return LogConfig(
            segment_bytes=config.log_segment_bytes,
            segment_ms=config.log_segment_ms,
            retention_ms=config.log_retention_ms,
            retention_bytes=config.log_retention_bytes,
            flush_messages=config.log_flush_messages,
            flush_ms=config.log_flush_ms,
            max_message_bytes=config.message_max_bytes,
        )
    except KafkaConfigError as exc:
        raise KafkaConfigError(f"log_{exc.setting.replace('.', '_')}", str(exc)) from None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _load_or_create_cluster_id(data_dir: Path, config: BrokerConfig) -> str:
    """Read meta.properties, or write it on first start (Kafka's format and cluster id style)."""
    path = data_dir / META_FILE
    if path.exists():
        props = _read_properties(path)
        stored = props.get("cluster.id")
        if stored:
            if config.cluster_id is not None and config.cluster_id != stored:
                raise KafkaConfigError(
                    "cluster_id",
                    f"data dir {data_dir} belongs to cluster {stored!r}, not {config.cluster_id!r}",
                )
            return stored
    cluster_id = config.cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    text = (
        "#\n"
        f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
        f"cluster.id={cluster_id}\n"
        f"node.id={config.node_id}\n"
        "version=1\n"
    )
    write_durably(path, text.encode())
    return cluster_id


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text("utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


