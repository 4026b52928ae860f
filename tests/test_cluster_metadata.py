"""The client's metadata cache across leader changes: epochs only move forward (KIP-320) and a
new-leader hint from a Produce or Fetch error (KIP-951) is taken only when it is newer.

The responses are real Metadata v12 messages (kio classes, as decoded off the wire); the
multi-broker scenarios (tests/test_chaos_scenarios.py) exercise the same code end to end.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafkakit.cluster import ClusterMetadata
from kafkakit.protocol import ApiKey
from kafkakit.protocol.build import make_response
from kafkakit.structs import BrokerInfo, TopicPartition

TOPIC_ID = uuid.uuid4()
TP = TopicPartition("orders", 0)


def _metadata(leader: int, epoch: int, topic_id: uuid.UUID = TOPIC_ID) -> Any:
    return make_response(
        ApiKey.METADATA, 12, throttle_time=0, cluster_id="c", controller_id=1,
        brokers=[{"node_id": n, "host": "127.0.0.1", "port": 9090 + n, "rack": None} for n in (1, 2, 3)],
        topics=[{
            "error_code": 0, "name": "orders", "topic_id": topic_id, "is_internal": False,
            "topic_authorized_operations": -2147483648,
            "partitions": [{
                "error_code": 0, "partition_index": 0, "leader_id": leader, "leader_epoch": epoch,
                "replica_nodes": [1, 2, 3], "isr_nodes": [1, 2, 3], "offline_replicas": [],
            }],
        }],
    )  # fmt: skip


def test_an_older_leader_epoch_never_replaces_a_newer_one() -> None:
    metadata = ClusterMetadata()
    metadata.update(_metadata(leader=2, epoch=7), {"orders"})
    metadata.update(_metadata(leader=1, epoch=6), {"orders"})  # a broker that has not caught up
    info = metadata.partition(TP)
    assert info is not None and (info.leader, info.leader_epoch) == (2, 7)
    metadata.update(_metadata(leader=3, epoch=8), {"orders"})
    info = metadata.partition(TP)
    assert info is not None and (info.leader, info.leader_epoch) == (3, 8)


def test_a_recreated_topic_starts_its_epochs_again() -> None:
    metadata = ClusterMetadata()
    metadata.update(_metadata(leader=2, epoch=7), {"orders"})
    metadata.update(_metadata(leader=1, epoch=0, topic_id=uuid.uuid4()), {"orders"})
    info = metadata.partition(TP)
    assert info is not None and (info.leader, info.leader_epoch) == (1, 0)


def test_a_leader_hint_is_taken_only_when_newer_and_reachable() -> None:
    metadata = ClusterMetadata()
    metadata.update(_metadata(leader=1, epoch=4), {"orders"})
    assert not metadata.apply_leader_hint(TP, 2, 4, [])  # not newer
    assert not metadata.apply_leader_hint(TP, 9, 5, [])  # an unknown broker without its address
    assert metadata.apply_leader_hint(TP, 9, 5, [BrokerInfo(9, "127.0.0.1", 9999, None)])
    info = metadata.partition(TP)
    assert info is not None and (info.leader, info.leader_epoch, info.replicas) == (9, 5, (1, 2, 3))
    assert metadata.brokers[9].port == 9999
    assert metadata.leader_for(TP) == 9
    assert not metadata.apply_leader_hint(TopicPartition("other", 0), 1, 9, [])  # nothing known of it
