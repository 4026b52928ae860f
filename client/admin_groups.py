"""Consumer groups, committed offsets, offset lookups and incremental config changes for :class:`kafkakit.Admin`.

:class:`GroupAdmin` holds the request logic; ``Admin.list_groups`` and its
siblings delegate here so ``admin.py`` stays one module per concern. Group
requests go to the group's coordinator (FindCoordinator, retried while the
coordinator loads, e.g. while Kafka creates ``__consumer_offsets`` on first use).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaError, UnsupportedVersionError, for_code, raise_for_code
from kafkakit.net.connection import BrokerConnection
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = [
    "ConfigEntry",
    "ConfigOperation",
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "OffsetSpec",
]

_GROUP_KEY_TYPE = 0
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look the coordinator up again.
_COORDINATOR_RETRY = {14, 15, 16}
_RESOURCE_TYPES = {"topic": 2, "broker": 4, "group": 32}
# IncrementalAlterConfigs is not in the client's shared version table; v0-1 share one layout.

#: ``set``, ``delete``, ``append`` or ``subtract`` (Kafka's AlterConfigOp.OpType).
ConfigOperation = Literal["set", "delete", "append", "subtract"]
_CONFIG_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}

#: What :meth:`GroupAdmin.list_offsets` looks up per partition: ``"earliest"``,
#: ``"latest"`` or a timestamp in ms (the first offset at or after it).
OffsetSpec = Literal["earliest", "latest"] | int


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as ListGroups reports it."""

    group_id: str
    protocol_type: str
    state: str
    #: ``classic``, ``consumer`` (KIP-848), ``share``... (ListGroups v5+; "" from older brokers).
    group_type: str = ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a group: its ids, host and (for consumer groups) assigned partitions."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]
    #: A KIP-848 member's epoch, and the assignment the broker is moving it to (None in classic groups).
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group's state (``Stable``, ``Empty``, ``Dead`` for one that does not exist...), protocol and members.

    For a KIP-848 group (``group_type`` "consumer"), ``protocol`` is the broker-side assignor,
    ``group_epoch`` the group's epoch and ``state`` may also be ``Assigning`` or ``Reconciling``.
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int
    group_type: str = "classic"
    group_epoch: int | None = None


# DescribeConfigs' ConfigSource values.
_CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a topic or broker with where its value comes from (``source``, Kafka's ConfigSource name)."""

    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool

    @property
    def is_override(self) -> bool:
        """Set on the resource itself (``kafka-topics --describe`` lists only these)."""
        return self.source in ("DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG")


class GroupAdmin:
    """Group and offset administration over one :class:`~kafkakit.cluster.Cluster` (used by ``Admin``)."""

    def __init__(self, cluster: Cluster, *, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self._cluster = cluster
        self._timeout = request_timeout_ms / 1000
        self._backoff = retry_backoff_ms / 1000

    # -- coordinators ------------------------------------------------------

    async def coordinator(self, group_id: str) -> tuple[int, BrokerConnection]:
        """The node id of ``group_id``'s coordinator and a connection to it."""

        async def connect(response: Any) -> tuple[int, BrokerConnection]:
            node = int(response.node_id)
            return node, await self._cluster.connection(node)

        return await self._cluster.find_coordinator(
            group_id,
            _GROUP_KEY_TYPE,
            connect,
            what=f"group {group_id!r}",
            timeout=self._timeout,
            backoff=self._backoff,
        )

    async def _call_coordinator(self, group: str, api_key: int, error_of: Any, **fields: Any) -> Any:
        """Send to the coordinator; retry (after a new lookup) while it answers a coordinator error."""
        deadline = time.monotonic() + self._timeout
        while True:
            _node, conn = await self.coordinator(group)
            response = await conn.call(api_key, **fields)
            code = error_of(response)
            if code not in _COORDINATOR_RETRY or time.monotonic() >= deadline:
                return response
            await asyncio.sleep(self._backoff)

    # -- groups ------------------------------------------------------------

    async def list_groups(self, types: Iterable[str] | None = None) -> list[GroupListing]:
        """Every group of every broker (of ``types``: "classic", "consumer"..., when given), sorted by id."""
        types_filter = [] if types is None else list(types)
        await self._cluster.refresh_metadata()
        nodes = list(self._cluster.metadata.brokers) or [-1]
        listings: dict[str, GroupListing] = {}
        for node in nodes:
            conn = await (self._cluster.any_connection() if node < 0 else self._cluster.connection(node))
            response = await conn.call(ApiKey.LIST_GROUPS, states_filter=[], types_filter=types_filter)
            raise_for_code(int(response.error_code), "ListGroups")
            for g in response.groups:
                state = getattr(g, "group_state", "") or ""
                group_type = getattr(g, "group_type", "") or ""
                if types_filter and group_type and group_type not in types_filter:
                    continue
                listings[g.group_id] = GroupListing(g.group_id, g.protocol_type or "", state, group_type)
        return sorted(listings.values(), key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """State, protocol and members of each group, in the order asked.

        A group that does not exist is described with state ``Dead`` and no
        members (as Kafka's DescribeGroups answers); a refused one raises
        GroupAuthorizationFailedError.
        """
        from kafkakit.admin_consumer_groups import describe_consumer_group

        described = []
        for group_id in _names(group_ids, "describe_groups"):
            node, conn = await self.coordinator(group_id)
            consumer_group = await describe_consumer_group(conn, group_id, node)  # KIP-848 groups
            if consumer_group is not None:
                described.append(consumer_group)
                continue
            response = await self._call_coordinator(
                group_id,
                ApiKey.DESCRIBE_GROUPS,
                lambda r: int(r.groups[0].error_code) if r.groups else 0,
                groups=[group_id],
                include_authorized_operations=False,
            )
            for g in response.groups:
                raise_for_code(int(g.error_code), f"describing group {g.group_id!r}")
                members = tuple(
                    MemberDescription(
                        m.member_id,
                        getattr(m, "group_instance_id", None),
                        m.client_id,
                        m.client_host,
                        _assignment(g.protocol_type, m.member_assignment),
                    )
                    for m in g.members
                )
                described.append(
                    GroupDescription(
                        g.group_id, g.group_state, g.protocol_type, g.protocol_data, members, node
                    )
                )
        return described

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups with their committed offsets.

        Raises the typed error of the first group refused (NonEmptyGroupError for a
        group with members, GroupIdNotFoundError for one that does not exist); the
        other groups of the call were still deleted.
        """
        first: KafkaError | None = None
        for group_id in _names(group_ids, "delete_groups"):
            response = await self._call_coordinator(
                group_id,
                ApiKey.DELETE_GROUPS,
                lambda r: int(r.results[0].error_code) if r.results else 0,
                groups_names=[group_id],
            )
            for result in response.results:
                code = int(result.error_code)
                if code and first is None:
                    first = for_code(code)(f"deleting group {result.group_id!r}")
        if first is not None:
            raise first

    # -- committed offsets ---------------------------------------------------

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of ``group_id`` (of ``partitions``, or of every partition it has committed).

        Partitions without a committed offset are left out.
        """
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                by_topic[tp.topic].append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        response = await self._call_coordinator(
            group_id,
            ApiKey.OFFSET_FETCH,
            lambda r: int(getattr(r, "error_code", 0)),
            group_id=group_id,
            topics=topics,
            require_stable=False,
        )
        raise_for_code(int(getattr(response, "error_code", 0)), f"fetching offsets of group {group_id!r}")
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in response.topics:
            for p in topic.partitions:
                raise_for_code(int(p.error_code), f"offset of {topic.name}-{p.partition_index}")
                if int(p.committed_offset) < 0:
                    continue
                epoch = int(getattr(p, "committed_leader_epoch", -1))
                offsets[TopicPartition(topic.name, int(p.partition_index))] = OffsetAndMetadata(
                    int(p.committed_offset), p.metadata or "", None if epoch < 0 else epoch
                )
        return offsets

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` for ``group_id`` as an admin (no member, generation -1).

        The group must have no active members: the coordinator refuses a commit to
        a live group (UnknownMemberIdError on Kafka); the first partition's error is raised.
        """
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, value in offsets.items():
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            if om.offset < 0:
                raise ValueError(f"offset for {tp} must be non-negative, got {om.offset}")
            by_topic[tp.topic].append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": om.offset,
                    "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                    "commit_timestamp": -1,
                    "committed_metadata": om.metadata,
                }
            )
        response = await self._call_coordinator(
            group_id,
            ApiKey.OFFSET_COMMIT,
            _first_partition_error,
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time=-1,
            topics=[{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        )
        for topic in response.topics:
            for p in topic.partitions:
                raise_for_code(
                    int(p.error_code), f"committing {topic.name}-{p.partition_index} for group {group_id!r}"
                )

    # -- offsets by time ---------------------------------------------------

    async def list_offsets(
        self, specs: Mapping[TopicPartition, OffsetSpec], *, isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """The offset each partition's spec names: ``"earliest"``, ``"latest"`` or a timestamp (ms).

        For a timestamp with no record at or after it, the offset is -1.
        Raises UnknownTopicOrPartitionError for a partition that does not exist.
        """
        from kafkakit.consumer.offsets import EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED, list_offsets

        levels = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
        if isolation_level not in levels:
            raise ValueError(
                f"isolation_level must be read_uncommitted or read_committed, got {isolation_level!r}"
            )
        timestamps: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            if spec == "earliest":
                timestamps[tp] = EARLIEST
            elif spec == "latest":
                timestamps[tp] = LATEST
            elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
                timestamps[tp] = spec
            else:
                raise ValueError(
                    f"offset spec for {tp} must be 'earliest', 'latest' or a timestamp, got {spec!r}"
                )
        if not timestamps:
            return {}
        found = await list_offsets(
            self._cluster, timestamps, isolation_level=levels[isolation_level], timeout=self._timeout
        )
        return {tp: OffsetAndTimestamp(r.offset, r.timestamp) for tp, r in found.items()}

    # -- configs -----------------------------------------------------------

    async def describe_config_entries(
        self, resource_name: str, *, resource_type: Literal["topic", "broker"] = "topic"
    ) -> list[ConfigEntry]:
        """Every config of one topic or broker with its source, sorted by name."""
        if resource_type not in _RESOURCE_TYPES:
            raise ValueError(f"resource_type must be 'topic' or 'broker', got {resource_type!r}")
        if resource_type == "broker":
            conn = await self._cluster.connection(int(resource_name))
        else:
            conn = await self._cluster.any_connection()
        response = await conn.call(
            ApiKey.DESCRIBE_CONFIGS,
            resources=[
                {
                    "resource_type": _RESOURCE_TYPES[resource_type],
                    "resource_name": resource_name,
                    "configuration_keys": None,
                }
            ],
            include_synonyms=False,
            include_documentation=False,
        )
        entries: list[ConfigEntry] = []
        for result in response.results:
            raise_for_code(
                int(result.error_code), result.error_message or f"describing configs of {resource_name!r}"
            )
            for c in result.configs:
                source = int(getattr(c, "config_source", 0))
                entries.append(
                    ConfigEntry(
                        c.name,
                        c.value,
                        _CONFIG_SOURCES.get(source, str(source)),
                        bool(c.read_only),
                        bool(c.is_sensitive),
                    )
                )
        return sorted(entries, key=lambda e: e.name)

    async def incremental_alter_configs(
        self,
        resource_name: str,
        changes: Mapping[str, tuple[ConfigOperation, str | None]],
        *,
        resource_type: Literal["topic", "broker", "group"] = "topic",
        validate_only: bool = False,
    ) -> None:
        """Apply ``{config name: (operation, value)}`` to one topic, broker or group (IncrementalAlterConfigs)."""
        if resource_type not in _RESOURCE_TYPES:
            raise ValueError(f"resource_type must be 'topic', 'broker' or 'group', got {resource_type!r}")
        configs = []
        for name, (operation, value) in changes.items():
            if operation not in _CONFIG_OPS:
                raise ValueError(f"config operation for {name!r} must be one of {', '.join(_CONFIG_OPS)}")
            configs.append({"name": name, "config_operation": _CONFIG_OPS[operation], "value": value})
        if not configs:
            return
        if resource_type == "broker":
            conn = await self._cluster.connection(int(resource_name))
        else:
            conn = await self._cluster.any_connection()
        if not conn.supports(ApiKey.INCREMENTAL_ALTER_CONFIGS):
            raise UnsupportedVersionError(
                "the broker does not support IncrementalAlterConfigs "
                f"({conn.broker_api_versions.get(ApiKey.INCREMENTAL_ALTER_CONFIGS)})"
            )
        response = await conn.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            resources=[
                {
                    "resource_type": _RESOURCE_TYPES[resource_type],
                    "resource_name": resource_name,
                    "configs": configs,
                }
            ],
            validate_only=validate_only,
        )
        for result in response.responses:
            raise_for_code(
                int(result.error_code), result.error_message or f"altering configs of {resource_name!r}"
            )


def _names(group_ids: Iterable[str], method: str) -> list[str]:
    if isinstance(group_ids, str):
        raise TypeError(f"{method}() takes a list of group ids, not a string")
    names = list(group_ids)
    if not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"{method}() takes a list of non-empty group ids")
    return names


def _first_partition_error(response: Any) -> int:
    for topic in response.topics:
        for p in topic.partitions:
            if int(p.error_code):
                return int(p.error_code)
    return 0


def _assignment(protocol_type: str, data: bytes | None) -> tuple[TopicPartition, ...]:
    """The partitions in a consumer member's assignment (other protocols' bytes are opaque)."""
    if protocol_type != "consumer" or not data:
        return ()
    from kafkakit.consumer.assignors.protocol import decode_assignment

    try:
        return tuple(sorted(decode_assignment(data).partitions))
    except Exception:  # a foreign client's malformed bytes must not break describe
        return ()
