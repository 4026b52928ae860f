"""The group and transaction coordinators of a cluster node follow partition leadership.

In cluster mode ``__consumer_offsets`` and ``__transaction_state`` are replicated partitions
like any other. :class:`CoordinatorLeadership` is a metadata publisher (after the replica
manager, so the partition log is open and led): when this node becomes the leader of one of
their partitions the matching coordinator loads it (Kafka's onElection, with the leader epoch
as the coordinator epoch), and when it stops leading it unloads it (onResignation). It also
creates the two internal topics through the controller on first use (FindCoordinator asks;
Kafka's AutoTopicCreationManager does the same), and gives the transaction coordinator its
channel to write markers on other leaders (WriteTxnMarkers).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.coordinators.markers import NodeChannel, RemoteMarkers
from kafkakit.broker.coordinators.offsets_topic import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from kafkakit.broker.coordinators.transactions import TRANSACTION_TOPIC, TRANSACTION_TOPIC_CONFIGS
from kafkakit.broker.handlers.base import make, nested
from kafkakit.broker.metadata import MetadataDelta, MetadataImage
from kafkakit.broker.state import BrokerState, ControllerForwarder
from kafkakit.protocol import request_class

log = logging.getLogger("kafkakit.broker")

CREATE_TOPICS = 19
_CREATE_VERSION = 7
#: Seconds between two requests to create the same internal topic.
_CREATE_RETRY_S = 1.0


class CoordinatorLeadership:
    """Loads and unloads coordinator partitions as this node gains and loses their leadership."""

    def __init__(
        self, state: BrokerState, config: BrokerConfig, channel: ControllerForwarder, inter_broker_listener: str
    ) -> None:
        self.state = state
        self.config = config
        self.channel = channel
        self.inter_broker_listener = inter_broker_listener
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_create: dict[str, float] = {}
        #: Requests to other brokers' inter-broker listeners (markers, transaction verification).
        self.channel_to_brokers = NodeChannel(self._address_of, f"kafkakit-broker-{config.node_id}")

    def start(self) -> None:
        """Route transaction markers for other leaders through WriteTxnMarkers."""
        self.state.transactions.remote_markers = RemoteMarkers(self.channel_to_brokers)
        self.state.inter_broker = self.channel_to_brokers

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.state.transactions.shutdown()
        self.channel_to_brokers.close()

    # -- the metadata publisher ----------------------------------------------------------------

    def on_metadata(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Load newly led coordinator partitions, unload the ones led elsewhere now."""
        for topic, partition in delta.changed_partitions:
            if topic in (OFFSETS_TOPIC, TRANSACTION_TOPIC):
                self._follow(image, topic, partition)
        for name in delta.removed_topics:
            if name in (OFFSETS_TOPIC, TRANSACTION_TOPIC):
                coordinator = self._coordinator(name)
                for partition in list(coordinator.owned_partitions):
                    coordinator.unload_partition(partition)

    def _coordinator(self, topic: str) -> Any:
        return self.state.groups if topic == OFFSETS_TOPIC else self.state.transactions

    def _follow(self, image: MetadataImage, topic: str, partition: int) -> None:
        registration = image.partition(topic, partition)
        coordinator = self._coordinator(topic)
        if registration is not None and registration.leader == self.config.node_id:
            task = asyncio.get_running_loop().create_task(
                coordinator.load_partition(partition, registration.leader_epoch),
                name=f"kafkakit-load-{topic}-{partition}",
            )
            self._tasks.add(task)
            task.add_done_callback(self._loaded)
        elif partition in coordinator.owned_partitions or partition in coordinator.partitions.loading:
            epoch = registration.leader_epoch if registration is not None else None
            coordinator.unload_partition(partition, epoch)
            log.info("node %d: no longer coordinator for %s-%d", self.config.node_id, topic, partition)

    def _loaded(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("loading %s failed", task.get_name(), exc_info=task.exception())

    # -- internal topics -------------------------------------------------------------------------

    def request_internal_topic(self, topic: str) -> None:
        """Ask the controller to create ``topic`` (at most once a second; FindCoordinator retries)."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_create.get(topic, -_CREATE_RETRY_S) < _CREATE_RETRY_S:
            return
        self._last_create[topic] = loop.time()
        task = loop.create_task(self._create(topic), name=f"kafkakit-create-{topic}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, topic: str) -> None:
        config = self.config
        if topic == OFFSETS_TOPIC:
            partitions, replicas = config.offsets_topic_num_partitions, config.offsets_topic_replication_factor
            configs = dict(OFFSETS_TOPIC_CONFIGS)
        else:
            partitions, replicas = 1, config.transaction_state_log_replication_factor
            configs = {**TRANSACTION_TOPIC_CONFIGS, "min.insync.replicas": str(config.transaction_state_log_min_isr)}
        cls = request_class(CREATE_TOPICS, _CREATE_VERSION)
        config_cls = nested(cls, "CreatableTopicConfig")
        topic_cls = nested(cls, "CreatableTopic")
        request = make(
            cls,
            topics=(
                make(
                    topic_cls, name=topic, num_partitions=partitions, replication_factor=replicas, assignments=(),
                    configs=tuple(make(config_cls, name=k, value=v) for k, v in configs.items()),
                ),
            ),
            timeout=datetime.timedelta(seconds=30),
            validate_only=False,
        )  # fmt: skip
        try:
            response = await self.channel.send(request, 10.0)
        except (TimeoutError, ConnectionError) as exc:
            log.info("creating %s: the controller did not answer (%r)", topic, exc)
            return
        for result in response.topics:
            if result.error_code != 0 and result.error_code.name != "topic_already_exists":
                log.warning("creating %s: %s %s", topic, result.error_code.name, result.error_message or "")

    def _address_of(self, node_id: int) -> tuple[str, int] | None:
        image = self.state.image
        broker = image.brokers.get(node_id) if image is not None else None
        endpoint = broker.endpoint(self.inter_broker_listener) if broker is not None else None
        return None if endpoint is None else (endpoint.host, endpoint.port)

