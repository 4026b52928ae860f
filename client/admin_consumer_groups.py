"""KIP-848 consumer groups for :class:`kafkakit.Admin`: ConsumerGroupDescribe (API key 69).

A group whose members speak the "consumer" protocol (``Consumer(group_protocol="consumer")``)
is described by ConsumerGroupDescribe: its epoch, the broker-side assignor, and per member
its epoch, current assignment and target assignment. :meth:`GroupAdmin.describe_groups
<kafkakit.admin_groups.GroupAdmin.describe_groups>` asks it first, as the Java admin does, and
falls back to the classic DescribeGroups for a classic group (GROUP_ID_NOT_FOUND here) or a
broker without the API.
"""

from __future__ import annotations

from typing import Any

from kafkakit.errors import raise_for_code
from kafkakit.net.connection import BrokerConnection
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import TopicPartition

from .admin_groups import GroupDescription, MemberDescription

#: ConsumerGroupDescribe's answer for a group that is not a consumer ("consumer" protocol) group.
GROUP_ID_NOT_FOUND = 69


async def describe_consumer_group(conn: BrokerConnection, group_id: str, node: int) -> GroupDescription | None:
    """``group_id`` described by ConsumerGroupDescribe; None when it is not a consumer-protocol
    group (or the broker lacks the API): the caller describes it the classic way."""
    if not conn.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
        return None
    response = await conn.call(ApiKey.CONSUMER_GROUP_DESCRIBE, group_ids=[group_id], include_authorized_operations=False)
    for g in response.groups:
        code = int(g.error_code)
        if code == GROUP_ID_NOT_FOUND:
            return None
        raise_for_code(code, g.error_message or f"describing group {g.group_id!r}")
        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                _partitions(m.assignment),
                member_epoch=int(m.member_epoch),
                target_assignment=_partitions(m.target_assignment),
            )
            for m in g.members
        )
        return GroupDescription(
            g.group_id,
            _state(g.group_state),
            "consumer",
            g.assignor_name,
            members,
            node,
            group_type="consumer",
            group_epoch=int(g.group_epoch),
        )
    return None


def _partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    if assignment is None:
        return ()
    return tuple(
        sorted(TopicPartition(t.topic_name, int(p)) for t in assignment.topic_partitions for p in t.partitions)
    )


def _state(state: str) -> str:
    """Kafka's consumer group states (``stable``, ``empty``...) spelled as DescribeGroups spells them."""
    return {
        "empty": "Empty",
        "assigning": "Assigning",
        "reconciling": "Reconciling",
        "stable": "Stable",
        "dead": "Dead",
    }.get(state.lower(), state)
