"""Share groups (KIP-932) for :class:`kafkakit.Admin`: describe, list, delete, and their offsets.

- ShareGroupDescribe (key 77): state, epochs, members and their assignments;
- ListGroups v5 with ``types_filter=["share"]``;
- DeleteGroups (a share group is deleted like any other group, when empty);
- DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets
  (keys 90, 91, 92): the share-partition start offset of each partition, which
  an empty group may move (``alter``) or forget (``delete``: the partition is
  initialized again, by ``share.auto.offset.reset``, on next use).

Every request goes to the group's coordinator, found as for consumer groups.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkakit.admin_groups import GroupAdmin, GroupListing
from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaError, ShareGroupsNotSupportedError, for_code, raise_for_code
from kafkakit.net.connection import BrokerConnection
from kafkakit.protocol.build import make_request
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import TopicPartition

__all__ = ["ShareGroupAdmin", "ShareGroupDescription", "ShareMemberDescription", "SharePartitionOffset"]

_COORDINATOR_RETRY = {14, 15, 16}
_LIST_GROUPS_TYPES_VERSION = 5


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """One member of a share group and the partitions assigned to it (shared with other members)."""

    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """A share group: ``state`` is ``Empty``, ``Stable`` or ``Dead`` (does not exist)."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    coordinator: int


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """The share-partition start offset of a group on one partition (-1: not initialized) and its lag."""

    start_offset: int
    leader_epoch: int
    lag: int


def _not_supported(conn: BrokerConnection, api_key: int, what: str) -> None:
    if not conn.supports(api_key):
        raise ShareGroupsNotSupportedError(
            f"{what}: the broker does not support share groups (API {api_key} not advertised; "
            "Apache Kafka 4.0+ with share groups enabled is needed)"
        )


class ShareGroupAdmin:
    """Share-group administration over one :class:`~kafkakit.cluster.Cluster` (used by ``Admin``)."""

    def __init__(self, cluster: Cluster, *, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self._cluster = cluster
        self._groups = GroupAdmin(cluster, request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self._timeout = request_timeout_ms / 1000
        self._backoff = retry_backoff_ms / 1000

    async def _call(self, group: str, api_key: int, error_of: Any, /, **fields: Any) -> tuple[int, Any]:
        """Send to the group's coordinator, retrying while it answers a coordinator error."""
        deadline = time.monotonic() + self._timeout
        while True:
            node, conn = await self._groups.coordinator(group)
            _not_supported(conn, api_key, f"share group {group!r}")
            response = await conn.call(api_key, **fields)
            code = error_of(response)
            if code == 35:  # UNSUPPORTED_VERSION: advertised, but share groups are off (share.version=0)
                raise ShareGroupsNotSupportedError(
                    f"share group {group!r}: the broker does not support share groups (UNSUPPORTED_VERSION: "
                    "share groups are disabled, e.g. the share.version feature is 0)"
                )
            if code not in _COORDINATOR_RETRY or time.monotonic() >= deadline:
                return node, response
            await asyncio.sleep(self._backoff)

    async def describe_share_groups(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        """State, epochs and members (with assignments) of each share group, in the order asked.

        A group that does not exist has state ``Dead``; a group of another type raises
        GroupIdNotFoundError (as Kafka answers).
        """
        names = _names(group_ids, "describe_share_groups")
        described = []
        for group_id in names:
            node, response = await self._call(
                group_id,
                ApiKey.SHARE_GROUP_DESCRIBE,
                lambda r: int(r.groups[0].error_code) if r.groups else 0,
                group_ids=[group_id],
                include_authorized_operations=False,
            )
            for g in response.groups:
                code = int(g.error_code)
                if code == 69:  # GROUP_ID_NOT_FOUND: Kafka's answer for a group that does not exist
                    described.append(ShareGroupDescription(g.group_id, "Dead", -1, -1, "", (), node))
                    continue
                raise_for_code(code, g.error_message or f"describing share group {g.group_id!r}")
                members = tuple(
                    ShareMemberDescription(
                        m.member_id,
                        m.client_id,
                        m.client_host,
                        m.rack_id,
                        int(m.member_epoch),
                        tuple(m.subscribed_topic_names),
                        tuple(
                            sorted(
                                TopicPartition(t.topic_name, int(p))
                                for t in m.assignment.topic_partitions
                                for p in t.partitions
                            )
                        ),
                    )
                    for m in g.members
                )
                described.append(
                    ShareGroupDescription(
                        g.group_id,
                        g.group_state,
                        int(g.group_epoch),
                        int(g.assignment_epoch),
                        g.assignor_name,
                        members,
                        node,
                    )
                )
        return described

    async def list_share_groups(self) -> list[GroupListing]:
        """Every share group of the cluster (ListGroups with ``types_filter=["share"]``), sorted by id."""
        await self._cluster.refresh_metadata()
        nodes = list(self._cluster.metadata.brokers) or [-1]
        listings: dict[str, GroupListing] = {}
        for node in nodes:
            conn = await (self._cluster.any_connection() if node < 0 else self._cluster.connection(node))
            broker = conn.broker_api_versions.get(ApiKey.LIST_GROUPS)
            if broker is None or broker[1] < _LIST_GROUPS_TYPES_VERSION:
                raise ShareGroupsNotSupportedError(
                    f"listing share groups: the broker's ListGroups {broker} has no group types (v5+)"
                )
            request = make_request(
                ApiKey.LIST_GROUPS, _LIST_GROUPS_TYPES_VERSION, states_filter=[], types_filter=["share"]
            )
            response = await conn.send(request)
            raise_for_code(int(response.error_code), "ListGroups")
            for g in response.groups:
                if (g.group_type or "").lower() == "share":
                    listings[g.group_id] = GroupListing(g.group_id, g.protocol_type or "share", g.group_state or "")
        return sorted(listings.values(), key=lambda g: g.group_id)

    async def delete_share_groups(self, group_ids: Iterable[str]) -> None:
        """Delete share groups and their share-partition state (NonEmptyGroupError while members remain)."""
        await self._groups.delete_groups(_names(group_ids, "delete_share_groups"))

    async def describe_share_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, SharePartitionOffset]:
        """The share-partition start offset of ``group_id`` on each partition (of ``partitions``, default
        every partition the group has state for); partitions without state are left out."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                by_topic[tp[0]].append(int(tp[1]))
            topics = [{"topic_name": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]
        _node, response = await self._call(
            group_id,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            lambda r: int(r.groups[0].error_code) if r.groups else 0,
            groups=[{"group_id": group_id, "topics": topics}],
        )
        found: dict[TopicPartition, SharePartitionOffset] = {}
        for g in response.groups:
            raise_for_code(int(g.error_code), g.error_message or f"describing offsets of share group {group_id!r}")
            for t in g.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code == 3:
                        continue  # a partition without share state
                    raise_for_code(code, p.error_message or f"offset of {t.topic_name}-{p.partition_index}")
                    if int(p.start_offset) < 0:
                        continue
                    found[TopicPartition(t.topic_name, int(p.partition_index))] = SharePartitionOffset(
                        int(p.start_offset), int(p.leader_epoch), int(getattr(p, "lag", -1))
                    )
        return found

    async def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set the share-partition start offsets of an empty share group (the next delivery starts there)."""
        by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
        for tp, offset in offsets.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"offset for {tp} must be a non-negative integer, got {offset!r}")
            by_topic[tp[0]].append({"partition_index": int(tp[1]), "start_offset": offset})
        if not by_topic:
            return
        _node, response = await self._call(
            group_id,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS,
            lambda r: int(r.error_code),
            group_id=group_id,
            topics=[{"topic_name": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
        )
        raise_for_code(int(response.error_code), response.error_message or f"altering offsets of {group_id!r}")
        _raise_first(
            (int(p.error_code), p.error_message or f"{t.topic_name}-{p.partition_index}")
            for t in response.responses
            for p in t.partitions
        )

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        """Forget an empty share group's state for ``topics`` (re-initialized on next use)."""
        if isinstance(topics, str):
            raise TypeError("delete_share_group_offsets() takes a list of topic names, not a string")
        names = sorted(set(topics))
        if not names:
            return
        _node, response = await self._call(
            group_id,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS,
            lambda r: int(r.error_code),
            group_id=group_id,
            topics=[{"topic_name": t} for t in names],
        )
        raise_for_code(int(response.error_code), response.error_message or f"deleting offsets of {group_id!r}")
        _raise_first((int(t.error_code), t.error_message or t.topic_name) for t in response.responses)


def _raise_first(codes: Iterable[tuple[int, str]]) -> None:
    first: KafkaError | None = None
    for code, message in codes:
        if code and first is None:
            first = for_code(code)(message)
    if first is not None:
        raise first


def _names(group_ids: Iterable[str], method: str) -> list[str]:
    if isinstance(group_ids, str):
        raise TypeError(f"{method}() takes a list of group ids, not a string")
    names = list(group_ids)
    if not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"{method}() takes a list of non-empty group ids")
    return names
