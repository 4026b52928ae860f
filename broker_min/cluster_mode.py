"""A broker_min node in a KRaft cluster: the quorum, the controller and the broker's side of both.

:class:`ClusterRuntime` is what :class:`~kafkakit.broker.server.Broker` starts when
``controller.quorum.voters`` is set. Every node is combined (``process.roles=broker,controller``):

- a :class:`~kafkakit.broker.raft.RaftNode` voter, whose metadata log lives in
  ``<data dir>/.kafkakit-metadata/``, served with the controller's APIs on the node's
  controller listener (its address in ``controller.quorum.voters``);
- a :class:`~kafkakit.broker.metadata.loader.MetadataLoader` that replays the committed log into
  the node's :class:`~kafkakit.broker.metadata.MetadataImage` (``state.image``);
- a :class:`~kafkakit.broker.controller.QuorumController`, active while this node leads the quorum;
- the broker's :class:`~kafkakit.broker.controller.BrokerLifecycle` (registration, heartbeats,
  controlled shutdown) and :class:`~kafkakit.broker.controller.ControllerChannel` (forwarded
  admin requests, AlterPartition, producer id blocks);
- the :class:`~kafkakit.broker.replication.ReplicaManager`, which leads and follows partitions
  as the image says, and the group and transaction coordinators, which load the
  ``__consumer_offsets`` / ``__transaction_state`` partitions this node leads
  (:mod:`kafkakit.broker.cluster_coordinators`);
- a :class:`~kafkakit.broker.security.metadata_publisher.SecurityPublisher`: the authorizer's
  ACLs and the SCRAM credentials are the image's (``--add-scram`` entries go to the controller).

Start-up does not wait for the quorum: a node alone cannot elect a leader, so
:meth:`ClusterRuntime.start` returns at once, with the broker's listeners bound but not yet
processing requests. As Kafka's BrokerServer does (it enables request processing once the
lifecycle's ``initialCatchUpFuture`` completed), the node serves clients only after its initial
catch-up: the first heartbeat answer saying ``is_caught_up``, i.e. its image has replayed the
metadata log up to this incarnation's RegisterBrokerRecord, so it holds every record the
controller had written before the node registered (all committed by then). After a restart the replayed
log prefix can already list every broker and older ACLs and SCRAM users, so answering earlier
would let a deleted user log in or a deleted ACL allow access. The broker then calls
``on_caught_up`` (:class:`~kafkakit.broker.server.Broker` opens its gate): connections that
arrived earlier were accepted but their requests (ApiVersions, SASL, Metadata, a follower's
Fetch) waited unread, and are served now; a client whose request timeout ends first gets no
answer and retries, as with Kafka, which starts processing requests only after that catch-up
(and its first unfencing, which here comes with the same heartbeat answer). The gate stays
open for the life of the process, whatever fencing follows. Nothing catch-up needs goes through
the broker listeners: the quorum, registration and heartbeats use the controller listener
(:class:`~kafkakit.broker.raft.RaftEndpoint`), which is served from the start, so the gate
cannot deadlock a cluster. :meth:`ClusterRuntime.wait_ready` waits until the node has caught
up and is unfenced (the controller unfences it on that same heartbeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from kafkakit.broker.cluster_coordinators import CoordinatorLeadership
from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.controller import (
    BrokerLifecycle,
    ControllerChannel,
    ControllerSettings,
    QuorumController,
    controller_apis,
)
from kafkakit.broker.metadata import MetadataDelta, MetadataImage
from kafkakit.broker.metadata.loader import MetadataLoader
from kafkakit.broker.producer_id_blocks import ControllerIdBlocks
from kafkakit.broker.raft import RaftConfig, RaftEndpoint, RaftNode, RaftPeers, parse_voters
from kafkakit.broker.replication import ReplicaManager, ReplicationSettings
from kafkakit.broker.security.metadata_publisher import SecurityPublisher
from kafkakit.broker.state import BrokerState
from kafkakit.errors import KafkaConfigError

log = logging.getLogger("kafkakit.broker")

METADATA_DIR = ".kafkakit-metadata"
#: Kafka's SecurityProtocol ids, as BrokerRegistration carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
#: Seconds a stopping node waits for the controller to move its leaderships away.
CONTROLLED_SHUTDOWN_TIMEOUT = 15.0


def raft_config(config: BrokerConfig, cluster_id: str) -> RaftConfig:
    """The quorum settings of this node from the broker's ``controller.quorum.*`` settings."""
    assert config.controller_quorum_voters is not None
    return RaftConfig(
        node_id=config.node_id,
        voters=parse_voters(config.controller_quorum_voters),
        cluster_id=cluster_id,
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
    )


def controller_settings(config: BrokerConfig) -> ControllerSettings:
    """The controller's settings from the broker's."""
    return ControllerSettings(
        num_partitions=config.num_partitions,
        default_replication_factor=config.default_replication_factor,
        broker_session_timeout_ms=config.broker_session_timeout_ms,
        broker_heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
        unclean_leader_election_enable=config.unclean_leader_election_enable,
        auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_seconds * 1000,
    )


class ClusterRuntime:
    """The quorum, controller, lifecycle and replica manager of one combined node."""

    def __init__(
        self,
        state: BrokerState,
        config: BrokerConfig,
        data_dir: Path,
        *,
        on_caught_up: Callable[[], None] | None = None,
    ) -> None:
        self.state = state
        self._on_caught_up = on_caught_up
        self.config = config
        raft_settings = raft_config(config, state.cluster_id)
        self.voters = raft_settings.voters
        self.peers = RaftPeers(self.voters)
        self.raft = RaftNode(raft_settings, data_dir / METADATA_DIR, self.peers)
        self.loader = MetadataLoader(self.raft, config.metadata_snapshot_records)
        self.controller = QuorumController(
            config.node_id, self.raft, self.loader, controller_settings(config), cluster_id=state.cluster_id
        )
        me = self.voters[config.node_id]
        self.endpoint = RaftEndpoint(self.raft, self.peers, me.host, me.port, apis=controller_apis(self.controller))
        self.channel = ControllerChannel(self.raft, self.voters)
        self.lifecycle: BrokerLifecycle | None = None
        self.replicas: ReplicaManager | None = None
        self.producer_id_blocks: ControllerIdBlocks | None = None
        self.coordinators: CoordinatorLeadership | None = None
        self.security: SecurityPublisher | None = None
        self._started = False

    async def start(self) -> None:
        """Serve the quorum, replay the metadata log, then register this broker and follow the image."""
        state = self.state
        endpoints = state.listener_endpoints
        inter_broker = self.config.inter_broker_listener_name or next(iter(endpoints))
        protocols = state.listener_protocols
        if inter_broker.upper() not in endpoints:
            raise KafkaConfigError("inter.broker.listener.name", f"{inter_broker} is not one of the listeners")
        if protocols.get(inter_broker.upper(), "PLAINTEXT") != "PLAINTEXT":
            # Followers and coordinators connect without TLS or SASL for now.
            raise KafkaConfigError(
                "inter.broker.listener.name",
                f"{inter_broker} uses {protocols[inter_broker.upper()]}: only a PLAINTEXT inter-broker listener is supported yet",
            )
        listeners = [
            (name, host, port, SECURITY_PROTOCOL_IDS.get(protocols.get(name, "PLAINTEXT"), 0))
            for name, (host, port) in endpoints.items()
        ]
        self.lifecycle = BrokerLifecycle(
            self.channel, self.config.node_id, state.cluster_id, listeners,
            lambda: self.loader.image.offset, self.config.broker_heartbeat_interval_ms,
            on_caught_up=self._on_caught_up,
        )  # fmt: skip
        lifecycle = self.lifecycle
        self.replicas = ReplicaManager(
            state,
            self.config.node_id,
            dataclasses.replace(ReplicationSettings.from_config(self.config), inter_broker_listener=inter_broker.upper()),
            isr_channel=lambda request: self.channel.send(request, self.config.controller_quorum_request_timeout_ms / 1000),
            broker_epoch=lambda: lifecycle.broker_epoch,
        )
        self.producer_id_blocks = ControllerIdBlocks(self.channel, self.config.node_id, lambda: lifecycle.broker_epoch)
        state.image = self.loader.image
        state.replicas = self.replicas
        state.controller_channel = self.channel
        state.producer_ids.use_block_source(self.producer_id_blocks)
        state.active_controller = lambda: self.raft.leader_and_epoch().leader_id
        self.coordinators = CoordinatorLeadership(state, self.config, self.channel, inter_broker.upper())
        state.internal_topic_requester = self.coordinators.request_internal_topic
        self.coordinators.start()
        self.loader.add_publisher(self._follow_image)
        self.security = SecurityPublisher(state, state.scram_credentials.added)
        self.loader.add_publisher(self.security.on_metadata)
        self.loader.add_publisher(self.replicas.on_metadata)
        # After the replica manager: a coordinator loads a partition whose log is open and led.
        self.loader.add_publisher(self.coordinators.on_metadata)
        await self.endpoint.start()
        self.loader.start()
        self.controller.start()
        await self.replicas.start()
        lifecycle.start()
        self.producer_id_blocks.start()
        self.security.start()
        self._started = True

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this node's leaderships away; give up when the quorum has
        had no leader for a few election timeouts (the whole cluster is stopping) or after
        :data:`CONTROLLED_SHUTDOWN_TIMEOUT`."""
        assert self.lifecycle is not None
        task = asyncio.create_task(self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT))
        leaderless_limit = 3 * self.config.controller_quorum_election_timeout_ms / 1000
        leaderless_since: float | None = None
        loop = asyncio.get_running_loop()
        while not task.done():
            await asyncio.wait({task}, timeout=0.1)
            if self.raft.leader_and_epoch().leader_id is None:
                leaderless_since = leaderless_since or loop.time()
                if loop.time() - leaderless_since > leaderless_limit:
                    log.info("controlled shutdown: the quorum has no leader; stopping without it")
                    task.cancel()
            else:
                leaderless_since = None
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await task

    def _follow_image(self, image: MetadataImage, delta: MetadataDelta) -> None:
        # A snapshot replaces the loader's image object: handlers read the current one.
        self.state.image = image

    async def wait_ready(self, timeout: float) -> None:
        """Wait until this broker has caught up with the metadata log (it serves clients) and is
        unfenced (TimeoutError after ``timeout`` s)."""
        assert self.lifecycle is not None
        async with asyncio.timeout(timeout):
            await self.lifecycle.wait_caught_up(timeout)
            await self.lifecycle.wait_unfenced(timeout)

    async def stop(self, *, graceful: bool = True) -> None:
        """Controlled shutdown when ``graceful`` (leaderships move away first), then stop everything."""
        if not self._started:
            return
        self._started = False
        assert self.lifecycle is not None and self.replicas is not None and self.producer_id_blocks is not None
        if graceful:
            await self._controlled_shutdown()
        await self.producer_id_blocks.stop()
        if self.security is not None:
            await self.security.stop()
        if self.coordinators is not None:
            await self.coordinators.stop()
        await self.lifecycle.stop()
        await self.replicas.stop()
        await self.controller.stop()
        with contextlib.suppress(Exception):
            await self.endpoint.stop(graceful=graceful)
        await self.channel.close()
        await self.loader.stop()
        await asyncio.sleep(0)
