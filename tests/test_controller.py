"""kafkakit.broker.controller: a 3-voter KRaft controller quorum over real sockets, in one event loop.

Each node is a RaftNode with its own listener serving the quorum APIs plus the controller's
(``controller_apis``), a MetadataLoader and a QuorumController; three BrokerLifecycles
(brokers 1-3, one per node, with made-up client listeners) register and heartbeat through
their node's ControllerChannel. Timeouts are short (election 300 ms, broker session
1.5 s, heartbeats every 150 ms) so each test takes a few seconds.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker.controller import (
    BrokerLifecycle,
    ControllerChannel,
    ControllerSettings,
    QuorumController,
    controller_apis,
    place,
)
from kafkakit.broker.metadata import MetadataImage, PartitionRegistration
from kafkakit.broker.metadata.loader import MetadataLoader
from kafkakit.broker.ports import free_ports
from kafkakit.broker.raft import RaftConfig, RaftEndpoint, RaftNode, RaftPeers, Voter
from kafkakit.protocol.build import make_request
from kio.schema.errors import ErrorCode

CLUSTER = "controller-test-cluster"
ELECTION_MS = 300
FETCH_MS = 600
SESSION_MS = 1500
HEARTBEAT_MS = 150
ZERO = uuid.UUID(int=0)


@dataclass
class Node:
    node_id: int
    raft: RaftNode
    loader: MetadataLoader
    controller: QuorumController
    endpoint: RaftEndpoint
    channel: ControllerChannel
    running: bool = True

    @property
    def image(self) -> MetadataImage:
        return self.loader.image


class Cluster:
    """Three controller nodes (1-3) and a broker lifecycle per node."""

    def __init__(self, root: Path, settings: ControllerSettings) -> None:
        self.root = root
        self.settings = settings
        self.voters = {i: Voter(i, "127.0.0.1", port) for i, port in zip((1, 2, 3), free_ports(3), strict=True)}
        self.nodes: dict[int, Node] = {}
        self.brokers: dict[int, BrokerLifecycle] = {}
        self._retired: list[BrokerLifecycle] = []

    async def start(self) -> None:
        for i in self.voters:
            config = RaftConfig(
                i,
                self.voters,
                cluster_id=CLUSTER,
                election_timeout_ms=ELECTION_MS,
                fetch_timeout_ms=FETCH_MS,
                election_backoff_max_ms=100,
                request_timeout_ms=500,
                fetch_max_wait_ms=100,
            )
            peers = RaftPeers(self.voters)
            raft = RaftNode(config, self.root / f"node-{i}", peers)
            loader = MetadataLoader(raft)
            loader.start()
            controller = QuorumController(i, raft, loader, self.settings)
            voter = self.voters[i]
            endpoint = RaftEndpoint(raft, peers, voter.host, voter.port, apis=controller_apis(controller))
            await endpoint.start()
            controller.start()
            channel = ControllerChannel(raft, self.voters, timeout=10.0)
            self.nodes[i] = Node(i, raft, loader, controller, endpoint, channel)
        await self.active()
        for i in self.voters:
            self.start_broker(i)
        for lifecycle in self.brokers.values():
            await lifecycle.wait_unfenced(5.0)

    def start_broker(self, broker_id: int, incarnation: uuid.UUID | None = None) -> BrokerLifecycle:
        node = self.nodes[broker_id]
        old = self.brokers.get(broker_id)
        if old is not None:
            self._retired.append(old)
        lifecycle = BrokerLifecycle(
            node.channel,
            broker_id,
            CLUSTER,
            [("PLAINTEXT", "127.0.0.1", 19090 + broker_id, 0)],
            lambda: node.loader.image.offset,
            HEARTBEAT_MS,
            incarnation_id=incarnation,
        )
        lifecycle.start()
        self.brokers[broker_id] = lifecycle
        return lifecycle

    async def stop(self) -> None:
        for lifecycle in [*self.brokers.values(), *self._retired]:
            await lifecycle.stop()
        for node in self.nodes.values():
            await node.controller.stop()
            await node.channel.close()
            if node.running:
                await node.endpoint.stop(graceful=False)

    def running(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.running]

    async def active(self, timeout: float = 5.0) -> Node:
        """The one active controller, once there is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            active = [n for n in self.running() if n.controller.is_active]
            if len(active) == 1:
                return active[0]
            await asyncio.sleep(0.01)
        raise AssertionError(f"no active controller: {[(n.node_id, n.raft.role) for n in self.running()]}")

    async def follower(self) -> Node:
        active = await self.active()
        return next(n for n in self.running() if n is not active)

    async def send(self, request: Any, via: int | None = None) -> Any:
        """Through a node's ControllerChannel (a follower's unless ``via`` says otherwise)."""
        node = self.nodes[via] if via is not None else await self.follower()
        return await node.channel.send(request, 10.0)

    async def send_to_active(self, request: Any) -> Any:
        """Straight to the active controller (no retries), to see every error it answers."""
        active = await self.active()
        peers = RaftPeers(self.voters)
        try:
            return await peers.send(active.node_id, request, 5.0)
        finally:
            await peers.close()

    async def everywhere(self, check: Callable[[MetadataImage], bool], timeout: float = 5.0) -> None:
        """Wait until ``check`` holds on every running node's image."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(check(n.image) for n in self.running()):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"not on every node within {timeout}s: {check}")


def settings(**overrides: Any) -> ControllerSettings:
    base = ControllerSettings(
        broker_session_timeout_ms=SESSION_MS,
        broker_heartbeat_interval_ms=HEARTBEAT_MS,
        leader_imbalance_check_interval_ms=60_000,
    )
    return replace(base, **overrides)


ClusterFactory = Callable[..., Awaitable[Cluster]]


@pytest.fixture
async def start_cluster(tmp_path: Path) -> AsyncIterator[ClusterFactory]:
    """Starts a cluster with the given ControllerSettings overrides (stopped after the test)."""
    started: list[Cluster] = []

    async def start(**overrides: Any) -> Cluster:
        c = Cluster(tmp_path / f"cluster-{len(started)}", settings(**overrides))
        started.append(c)
        await c.start()
        return c

    try:
        yield start
    finally:
        for c in started:
            await c.stop()


@pytest.fixture
async def cluster(start_cluster: ClusterFactory) -> Cluster:
    return await start_cluster()


# -- request builders ----------------------------------------------------------------------------


def new_topic(
    name: str,
    partitions: int = -1,
    rf: int = -1,
    assignments: dict[int, list[int]] | None = None,
    configs: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [{"partition_index": p, "broker_ids": b} for p, b in (assignments or {}).items()],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def create_topics(*topics: dict[str, Any], validate_only: bool = False, version: int = 7) -> Any:
    return make_request(19, version, topics=list(topics), timeout=10_000, validate_only=validate_only)


def alter_partition(
    broker_id: int,
    broker_epoch: int,
    topic_id: uuid.UUID,
    partition: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: list[tuple[int, int]],
    version: int = 3,
) -> Any:
    data: dict[str, Any] = {
        "partition_index": partition,
        "leader_epoch": leader_epoch,
        "partition_epoch": partition_epoch,
        "leader_recovery_state": 0,
        "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": e} for b, e in isr],
        "new_isr": [b for b, _ in isr],
    }
    return make_request(
        56,
        version,
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=[{"topic_id": topic_id, "partitions": [data]}],
    )


def alter_configs(
    name: str, *ops: tuple[str, int, str | None], resource_type: int = 2, validate_only: bool = False
) -> Any:
    return make_request(
        44,
        1,
        resources=[
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
        validate_only=validate_only,
    )


def registration(broker_id: int, incarnation: uuid.UUID, cluster_id: str = CLUSTER) -> Any:
    return make_request(
        62,
        4,
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=incarnation,
        listeners=[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19099, "security_protocol": 0}],
        features=[],
        rack=None,
        is_migrating_zk_broker=False,
        log_dirs=[],
        previous_broker_epoch=-1,
    )


def heartbeat(
    broker_id: int, epoch: int, offset: int, want_fence: bool = False, want_shut_down: bool = False
) -> Any:
    return make_request(
        63,
        1,
        broker_id=broker_id,
        broker_epoch=epoch,
        current_metadata_offset=offset,
        want_fence=want_fence,
        want_shut_down=want_shut_down,
    )


def error(response_item: Any) -> ErrorCode:
    return ErrorCode(int(response_item.error_code))


def partitions(image: MetadataImage, topic: str) -> dict[int, PartitionRegistration]:
    found = image.topics.get(topic)
    return dict(found.partitions) if found is not None else {}


async def create(
    cluster: Cluster, name: str, partitions_: int = -1, rf: int = -1, **kwargs: Any
) -> uuid.UUID:
    response = await cluster.send(create_topics(new_topic(name, partitions_, rf, **kwargs)))
    result = response.topics[0]
    assert error(result) is ErrorCode.none, result
    count = len(kwargs.get("assignments") or {}) or partitions_
    await cluster.everywhere(lambda image: len(partitions(image, name)) == count)
    topic_id: uuid.UUID = result.topic_id
    return topic_id


# -- tests ---------------------------------------------------------------------------------------


async def test_a_topic_created_through_any_node_reaches_every_image_with_leaders_spread(
    cluster: Cluster,
) -> None:
    response = await cluster.send(create_topics(new_topic("orders", 6, 3, configs={"retention.ms": "60000"})))
    result = response.topics[0]
    assert error(result) is ErrorCode.none
    assert (result.num_partitions, result.replication_factor) == (6, 3)
    assert result.topic_id != ZERO
    configs = {c.name: (c.value, c.config_source) for c in result.configs}
    assert configs["retention.ms"] == ("60000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"] == (str(1 << 30), 5)  # DEFAULT_CONFIG
    assert configs["unclean.leader.election.enable"] == ("false", 5)

    await cluster.everywhere(lambda image: len(partitions(image, "orders")) == 6)
    views = [partitions(n.image, "orders") for n in cluster.running()]
    assert views[0] == views[1] == views[2]
    for node in cluster.running():
        assert node.image.topics["orders"].topic_id == result.topic_id
        assert node.image.topic_configs("orders") == {"retention.ms": "60000"}
    parts = views[0]
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert collections.Counter(p.leader for p in parts.values()) == {1: 2, 2: 2, 3: 2}
    # Followers spread too: no two partitions led by one broker share the same replica order.
    assert len({p.replicas for p in parts.values()}) == 6


async def test_create_topics_validation_defaults_and_manual_assignments(cluster: Cluster) -> None:
    await create(cluster, "a.b", 1, 1)
    response = await cluster.send(
        create_topics(
            new_topic("a.b", 1, 1),
            new_topic("too-many-replicas", 1, 4),
            new_topic("bad/name", 1, 1),
            new_topic("bad-config", 1, 1, configs={"retention.ms": "soon"}),
            new_topic("bad-unclean", 1, 1, configs={"unclean.leader.election.enable": "maybe"}),
            new_topic("no-partitions", 0, 1),
            new_topic("a_b", 1, 1),
            new_topic("twice", 1, 1),
            new_topic("twice", 1, 1),
            new_topic("unregistered", assignments={0: [1, 9]}),
            new_topic("assignment-and-count", 2, assignments={0: [1]}),
            new_topic("defaults"),
            new_topic("manual", assignments={0: [3, 1], 1: [2, 3]}),
        )
    )
    codes = [(t.name, error(t)) for t in response.topics]
    assert codes == [
        ("a.b", ErrorCode.topic_already_exists),
        ("too-many-replicas", ErrorCode.invalid_replication_factor),
        ("bad/name", ErrorCode.invalid_topic_exception),
        ("bad-config", ErrorCode.invalid_config),
        ("bad-unclean", ErrorCode.invalid_config),
        ("no-partitions", ErrorCode.invalid_partitions),
        ("a_b", ErrorCode.invalid_topic_exception),
        ("twice", ErrorCode.invalid_request),
        ("twice", ErrorCode.invalid_request),
        ("unregistered", ErrorCode.invalid_replica_assignment),
        ("assignment-and-count", ErrorCode.invalid_request),
        ("defaults", ErrorCode.none),
        ("manual", ErrorCode.none),
    ]
    failed = response.topics[1]
    assert (failed.num_partitions, failed.replication_factor, failed.configs) == (-1, -1, None)
    await cluster.everywhere(lambda image: "manual" in image.topics and "defaults" in image.topics)
    image = (await cluster.active()).image
    assert {"too-many-replicas", "bad/name", "bad-config", "twice", "a_b"}.isdisjoint(image.topics)
    defaults = partitions(image, "defaults")
    assert len(defaults) == 1 and len(defaults[0].replicas) == 1  # num.partitions, default.replication.factor
    manual = partitions(image, "manual")
    assert [(p.replicas, p.leader) for _, p in sorted(manual.items())] == [((3, 1), 3), ((2, 3), 2)]

    # validate_only answers as a creation would, and creates nothing; v2 answers without configs.
    response = await cluster.send(create_topics(new_topic("dry-run", 3, 2), validate_only=True))
    assert error(response.topics[0]) is ErrorCode.none and response.topics[0].num_partitions == 3
    response = await cluster.send(create_topics(new_topic("old-client", 2, 2), version=2))
    assert error(response.topics[0]) is ErrorCode.none
    await cluster.everywhere(lambda image: "old-client" in image.topics)
    assert "dry-run" not in (await cluster.active()).image.topics


async def test_a_controller_that_is_not_active_answers_not_controller(cluster: Cluster) -> None:
    follower = await cluster.follower()
    peers = RaftPeers(cluster.voters)
    try:
        epoch = cluster.brokers[1].broker_epoch
        response = await peers.send(follower.node_id, heartbeat(1, epoch, 0), 2.0)
        assert error(response) is ErrorCode.not_controller
        response = await peers.send(follower.node_id, create_topics(new_topic("x", 1, 1)), 2.0)
        assert error(response.topics[0]) is ErrorCode.not_controller
        assert "x" not in (await cluster.active()).image.topics
        # ApiVersions lists the controller's APIs next to the quorum's.
        versions = await peers.send(
            follower.node_id, make_request(18, 3, client_software_name="t", client_software_version="1"), 2.0
        )
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[62] == (0, 4) and advertised[63] == (0, 2) and advertised[56] == (2, 3)
        assert advertised[19] == (2, 7) and advertised[52] == (0, 0)
        # An API the node does not serve still closes the connection.
        metadata = make_request(
            3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        with pytest.raises(ConnectionResetError):
            await peers.send(follower.node_id, metadata, 2.0)
    finally:
        await peers.close()


async def test_registration_epochs_cluster_id_duplicates_and_catching_up(cluster: Cluster) -> None:
    image = (await cluster.active()).image
    epochs = {b: lc.broker_epoch for b, lc in cluster.brokers.items()}
    assert len(set(epochs.values())) == 3
    for broker_id, epoch in epochs.items():
        registration_ = image.brokers[broker_id]
        assert registration_.broker_epoch == epoch and not registration_.fenced
        assert registration_.endpoints[0].port == 19090 + broker_id

    response = await cluster.send(registration(1, uuid.uuid4(), cluster_id="another-cluster"))
    assert error(response) is ErrorCode.inconsistent_cluster_id
    response = await cluster.send(registration(1, uuid.uuid4()))
    assert error(response) is ErrorCode.duplicate_broker_registration
    response = await cluster.send(heartbeat(1, epochs[1] + 1000, 0))
    assert error(response) is ErrorCode.stale_broker_epoch
    assert (await cluster.active()).image.brokers[1].broker_epoch == epochs[1]

    # A new broker is fenced until its metadata offset reaches its registration record (its epoch).
    response = await cluster.send(registration(4, uuid.uuid4()))
    assert error(response) is ErrorCode.none
    epoch = int(response.broker_epoch)
    assert epoch > max(epochs.values())
    assert (await cluster.active()).image.brokers[4].fenced
    response = await cluster.send(heartbeat(4, epoch, epoch - 1))
    assert (error(response), response.is_caught_up, response.is_fenced) == (ErrorCode.none, False, True)
    response = await cluster.send(heartbeat(4, epoch, epoch))
    assert (error(response), response.is_caught_up, response.is_fenced) == (ErrorCode.none, True, False)
    await cluster.everywhere(lambda image: not image.brokers[4].fenced)


async def test_a_silent_broker_is_fenced_and_gets_its_leadership_back_when_it_returns(
    start_cluster: ClusterFactory,
) -> None:
    cluster = await start_cluster(leader_imbalance_check_interval_ms=400)
    topic_id = await create(cluster, "events", 6, 3)
    before = partitions((await cluster.active()).image, "events")
    led_by_3 = {i for i, p in before.items() if p.leader == 3}
    assert len(led_by_3) == 2
    old_epoch = cluster.brokers[3].broker_epoch

    await cluster.brokers[3].stop()
    stopped = time.monotonic()
    await cluster.everywhere(lambda image: image.brokers[3].fenced, timeout=SESSION_MS / 1000 + 3)
    assert time.monotonic() - stopped >= (SESSION_MS - HEARTBEAT_MS) / 1000 - 0.05
    image = (await cluster.active()).image
    assert not image.brokers[1].fenced and not image.brokers[2].fenced
    after = partitions(image, "events")
    for i, p in after.items():
        assert p.leader in (1, 2) and 3 not in p.isr
        assert p.isr == tuple(r for r in before[i].replicas if r != 3)
        assert p.leader_epoch == before[i].leader_epoch + (1 if i in led_by_3 else 0)
        assert p.partition_epoch == before[i].partition_epoch + 1

    # Broker 3 comes back as a new incarnation: a new epoch, unfenced once caught up.
    returned = cluster.start_broker(3)
    await returned.wait_unfenced(5.0)
    assert returned.broker_epoch > old_epoch
    # The leaders take it back into their ISRs (what their replica fetchers would do) ...
    epochs = {b: lc.broker_epoch for b, lc in cluster.brokers.items()}
    for i, p in after.items():
        isr = [(b, epochs[b]) for b in (*p.isr, 3)]
        response = await cluster.send(
            alter_partition(p.leader, epochs[p.leader], topic_id, i, p.leader_epoch, p.partition_epoch, isr)
        )
        answer = response.topics[0].partitions[0]
        assert error(answer) is ErrorCode.none and 3 in answer.isr
    # ... and the preferred leader election hands it its partitions back.
    await cluster.everywhere(
        lambda image: all(p.leader == p.replicas[0] for p in partitions(image, "events").values()),
        timeout=5.0,
    )
    final = partitions((await cluster.active()).image, "events")
    assert {i for i, p in final.items() if p.leader == 3} == led_by_3


async def test_controlled_shutdown_moves_leadership_away_before_letting_the_broker_go(
    cluster: Cluster,
) -> None:
    await create(cluster, "spread", 6, 3)
    await create(cluster, "only-on-2", assignments={0: [2]})
    before = partitions((await cluster.active()).image, "spread")
    assert sum(p.leader == 2 for p in before.values()) == 2

    await cluster.brokers[2].controlled_shutdown(timeout=5.0)
    assert cluster.brokers[2].should_shut_down
    image = (await cluster.active()).image
    after = partitions(image, "spread")
    for i, p in after.items():
        assert p.leader in (1, 3) and 2 not in p.isr
        if before[i].leader != 2:
            assert p.leader == before[i].leader
    # No other replica can lead: the partition goes offline, and its ISR keeps its last member.
    only = partitions(image, "only-on-2")[0]
    assert (only.leader, only.isr) == (-1, (2,))
    assert image.brokers[2].fenced
    assert not image.brokers[1].fenced and not image.brokers[3].fenced


async def test_alter_partition_checks(cluster: Cluster) -> None:
    # Broker 4 (registered by hand) leads a partition, then asks to be fenced: broker 1 leads in epoch 1.
    response = await cluster.send(registration(4, uuid.uuid4()))
    epoch4 = int(response.broker_epoch)
    assert not (await cluster.send(heartbeat(4, epoch4, epoch4))).is_fenced
    topic_id = await create(cluster, "isr", assignments={0: [4, 1, 2]})
    assert partitions((await cluster.active()).image, "isr")[0].leader == 4
    response = await cluster.send(heartbeat(4, epoch4, epoch4, want_fence=True))
    assert response.is_fenced
    await cluster.everywhere(lambda image: partitions(image, "isr")[0].leader == 1)
    p = partitions((await cluster.active()).image, "isr")[0]
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 1, 1)
    e = {b: lc.broker_epoch for b, lc in cluster.brokers.items()}

    async def ask(broker: int, epoch: int, leader_epoch: int, partition_epoch: int, isr: list[tuple[int, int]],
                  topic: uuid.UUID = topic_id, partition: int = 0, version: int = 3) -> Any:  # fmt: skip
        request = alter_partition(
            broker, epoch, topic, partition, leader_epoch, partition_epoch, isr, version
        )
        return await cluster.send_to_active(request)

    def answer(response: Any) -> Any:
        assert error(response) is ErrorCode.none
        return response.topics[0].partitions[0]

    assert error(await ask(1, e[1] - 1, 1, 1, [(1, -1)])) is ErrorCode.stale_broker_epoch
    assert error(answer(await ask(1, e[1], 0, 1, [(1, -1)]))) is ErrorCode.fenced_leader_epoch
    assert error(answer(await ask(1, e[1], 2, 1, [(1, -1)]))) is ErrorCode.not_controller
    assert error(answer(await ask(2, e[2], 1, 1, [(2, -1)]))) is ErrorCode.invalid_request  # not the leader
    assert error(answer(await ask(1, e[1], 1, 0, [(1, -1)]))) is ErrorCode.invalid_update_version
    assert (
        error(answer(await ask(1, e[1], 1, 1, [(1, -1), (3, -1)]))) is ErrorCode.invalid_request
    )  # not a replica
    assert (
        error(answer(await ask(1, e[1], 1, 1, [(2, -1)]))) is ErrorCode.invalid_request
    )  # without the leader
    assert (
        error(answer(await ask(1, e[1], 1, 1, [(1, -1), (2, -1), (4, -1)]))) is ErrorCode.ineligible_replica
    )
    assert error(answer(await ask(1, e[1], 1, 1, [(1, e[1]), (2, e[2] - 1)]))) is ErrorCode.ineligible_replica
    assert (
        error(answer(await ask(1, e[1], 1, 1, [(1, -1)], topic=uuid.uuid4()))) is ErrorCode.unknown_topic_id
    )
    assert (
        error(answer(await ask(1, e[1], 1, 1, [(1, -1)], partition=7)))
        is ErrorCode.unknown_topic_or_partition
    )
    assert partitions((await cluster.active()).image, "isr")[0] == p  # nothing was written

    shrunk = answer(await ask(1, e[1], 1, 1, [(1, e[1])]))
    assert error(shrunk) is ErrorCode.none
    assert (shrunk.leader_id, tuple(shrunk.isr), shrunk.leader_epoch, shrunk.partition_epoch) == (
        1,
        (1,),
        1,
        2,
    )
    await cluster.everywhere(lambda image: partitions(image, "isr")[0].isr == (1,))
    offset = (await cluster.active()).image.offset
    same = answer(await ask(1, e[1], 1, 2, [(1, e[1])]))
    assert (error(same), tuple(same.isr), same.partition_epoch) == (ErrorCode.none, (1,), 2)
    assert (await cluster.active()).image.offset == offset  # an unchanged ISR writes nothing
    grown = answer(await ask(1, e[1], 1, 2, [(1, -1), (2, -1)], version=2))
    assert (error(grown), tuple(grown.isr), grown.leader_epoch, grown.partition_epoch) == (
        ErrorCode.none,
        (1, 2),
        1,
        3,
    )


async def test_unclean_leader_election_follows_the_topic_config(cluster: Cluster) -> None:
    clean = await create(cluster, "clean", assignments={0: [1, 2]})
    dirty = await create(
        cluster, "dirty", assignments={0: [1, 2]}, configs={"unclean.leader.election.enable": "true"}
    )
    epoch = cluster.brokers[1].broker_epoch
    for topic_id in (clean, dirty):  # broker 2 falls out of both ISRs
        response = await cluster.send(alter_partition(1, epoch, topic_id, 0, 0, 0, [(1, epoch)]))
        assert error(response.topics[0].partitions[0]) is ErrorCode.none

    await cluster.brokers[1].stop()
    await cluster.everywhere(lambda image: image.brokers[1].fenced, timeout=SESSION_MS / 1000 + 3)
    await cluster.everywhere(lambda image: partitions(image, "dirty")[0].leader == 2)
    image = (await cluster.active()).image
    assert partitions(image, "dirty")[0].isr == (2,)
    assert (partitions(image, "clean")[0].leader, partitions(image, "clean")[0].isr) == (-1, (1,))
    await asyncio.sleep(0.3)
    assert partitions((await cluster.active()).image, "clean")[0].leader == -1

    # Enabling it on the topic lets the controller elect the out-of-sync replica.
    response = await cluster.send(alter_configs("clean", ("unclean.leader.election.enable", 0, "true")))
    assert error(response.responses[0]) is ErrorCode.none
    await cluster.everywhere(lambda image: partitions(image, "clean")[0].leader == 2)
    assert partitions((await cluster.active()).image, "clean")[0].isr == (2,)


async def test_partitions_configs_and_deletion(cluster: Cluster) -> None:
    topic_id = await create(cluster, "grow", 2, 2)
    await create(cluster, "doomed", 1, 1)

    def grow(count: int, assignments: list[list[int]] | None = None, name: str = "grow") -> Any:
        assigned = None if assignments is None else [{"broker_ids": a} for a in assignments]
        topics = [{"name": name, "count": count, "assignments": assigned}]
        return make_request(37, 3, topics=topics, timeout=10_000, validate_only=False)

    response = await cluster.send(grow(4))
    assert error(response.results[0]) is ErrorCode.none
    await cluster.everywhere(lambda image: len(partitions(image, "grow")) == 4)
    for p in partitions((await cluster.active()).image, "grow").values():
        assert len(set(p.replicas)) == 2 and p.isr == p.replicas
    for count, assignments, name, code in [
        (4, None, "grow", ErrorCode.invalid_partitions),
        (3, None, "grow", ErrorCode.invalid_partitions),
        (5, None, "missing", ErrorCode.unknown_topic_or_partition),
        (6, [[1, 2]], "grow", ErrorCode.invalid_replica_assignment),
        (5, [[1]], "grow", ErrorCode.invalid_replica_assignment),
        (5, [[3, 1]], "grow", ErrorCode.none),
    ]:
        response = await cluster.send(grow(count, assignments, name))
        assert error(response.results[0]) is code, (count, assignments, name)
    await cluster.everywhere(lambda image: len(partitions(image, "grow")) == 5)
    assert partitions((await cluster.active()).image, "grow")[4].replicas == (3, 1)

    async def alter(*ops: tuple[str, int, str | None], **kwargs: Any) -> ErrorCode:
        response = await cluster.send(alter_configs(kwargs.pop("name", "grow"), *ops, **kwargs))
        return error(response.responses[0])

    assert await alter(("retention.ms", 0, "1000"), ("cleanup.policy", 2, "compact")) is ErrorCode.none
    await cluster.everywhere(lambda image: image.topic_configs("grow").get("retention.ms") == "1000")
    assert (await cluster.active()).image.topic_configs("grow")["cleanup.policy"] == "delete,compact"
    assert await alter(("cleanup.policy", 3, "delete"), ("retention.ms", 1, None)) is ErrorCode.none
    await cluster.everywhere(lambda image: image.topic_configs("grow") == {"cleanup.policy": "compact"})
    assert await alter(("segment.ms", 0, "5"), ("retention.ms", 0, "soon")) is ErrorCode.invalid_config
    assert await alter(("retention.ms", 2, "5")) is ErrorCode.invalid_config  # not a list
    assert await alter(("segment.ms", 0, "5"), validate_only=True) is ErrorCode.none
    assert await alter(("retention.ms", 0, "5"), name="missing") is ErrorCode.unknown_topic_or_partition
    assert await alter(("log.retention.ms", 0, "5"), name="1", resource_type=4) is ErrorCode.invalid_request
    await asyncio.sleep(0.2)
    assert (await cluster.active()).image.topic_configs("grow") == {"cleanup.policy": "compact"}

    response = await cluster.send(make_request(20, 6, topics=[{"name": None, "topic_id": topic_id},
                                                              {"name": None, "topic_id": uuid.uuid4()}], timeout=5000))  # fmt: skip
    assert [error(r) for r in response.responses] == [ErrorCode.none, ErrorCode.unknown_topic_id]
    assert response.responses[0].name == "grow"
    response = await cluster.send(make_request(20, 5, topic_names=["doomed", "never"], timeout=5000))
    assert [error(r) for r in response.responses] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    await cluster.everywhere(lambda image: not {"grow", "doomed"} & set(image.topics))
    assert (await cluster.active()).image.topic_configs("grow") == {}


async def test_producer_id_blocks_are_unique_across_nodes(cluster: Cluster) -> None:
    async def allocate(broker: int) -> tuple[int, int]:
        request = make_request(67, 0, broker_id=broker, broker_epoch=cluster.brokers[broker].broker_epoch)
        response = await cluster.send(request, via=broker)
        assert error(response) is ErrorCode.none
        return int(response.producer_id_start), int(response.producer_id_len)

    blocks = await asyncio.gather(*(allocate(b) for b in (1, 2, 3) for _ in range(3)))
    assert sorted(blocks) == [(i * 1000, 1000) for i in range(9)]
    await cluster.everywhere(lambda image: image.next_producer_id == 9000)
    response = await cluster.send(make_request(67, 0, broker_id=1, broker_epoch=-5))
    assert error(response) is ErrorCode.stale_broker_epoch


async def test_a_new_active_controller_takes_over_with_the_image_intact(cluster: Cluster) -> None:
    await create(cluster, "kept", 3, 3)
    old = await cluster.active()
    before = [r for r in old.image.to_records()]
    await cluster.brokers[old.node_id].stop()  # its broker goes down with it
    stopped = time.monotonic()
    await old.endpoint.stop(graceful=False)
    old.running = False

    new = await cluster.active(timeout=5.0)
    took = time.monotonic() - stopped
    assert new is not old
    assert took < (FETCH_MS + 2 * ELECTION_MS) / 1000 + 1.0, took
    assert new.image.to_records() == before
    # Requests work through either survivor.
    for via in (n.node_id for n in cluster.running()):
        response = await cluster.send(create_topics(new_topic(f"after-{via}", 2, 2)), via=via)
        assert error(response.topics[0]) is ErrorCode.none
    await cluster.everywhere(
        lambda image: {"after-1", "after-2", "after-3"} - {f"after-{old.node_id}"} <= set(image.topics)
    )
    # The survivors' brokers keep their sessions; the one that went down is fenced.
    await cluster.everywhere(lambda image: image.brokers[old.node_id].fenced, timeout=SESSION_MS / 1000 + 3)
    image = new.image
    assert [b for b in (1, 2, 3) if not image.brokers[b].fenced] == [n.node_id for n in cluster.running()]
    assert all(old.node_id not in p.isr for p in partitions(image, "kept").values())


def test_placement_round_robins_leaders_and_spreads_followers() -> None:
    assignment = place([3, 1, 2], 6, 2, start=1, shift=0)
    assert [r[0] for r in assignment] == [2, 3, 1, 2, 3, 1]
    assert all(len(set(r)) == 2 for r in assignment)
    # The follower distance shifts after a full round, so follower sets differ across rounds.
    assert assignment[:3] != assignment[3:]
    assert place([5], 2, 1) == [[5], [5]]
    with pytest.raises(ValueError):
        place([1, 2], 1, 3)
