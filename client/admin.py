"""The admin client: topics, the cluster, ACLs and SCRAM credentials.

CreateTopics and DeleteTopics go to the controller (retried after a metadata
refresh when the broker answers NOT_CONTROLLER); the calls return once the
change is visible in metadata, so a topic can be used right after
``create_topics``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

from kafkakit import acls as acls_module
from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkakit.admin_groups import (
    ConfigEntry,
    ConfigOperation,
    GroupAdmin,
    GroupDescription,
    GroupListing,
    OffsetSpec,
)
from kafkakit.admin_share_groups import ShareGroupAdmin, ShareGroupDescription, SharePartitionOffset
from kafkakit.cluster import Cluster
from kafkakit.errors import (
    IllegalStateError,
    KafkaConfigError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
    for_code,
    raise_for_code,
)
from kafkakit.metrics import Metrics, NetworkMetrics, metrics_enabled
from kafkakit.net.connection import BrokerConnection
from kafkakit.net.security import OAuthTokenProvider, SecurityConfig
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import (
    BrokerInfo,
    ClusterDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    TopicDescription,
    TopicPartition,
)

_NOT_CONTROLLER = 41
_UNKNOWN_TOPIC = 3
_RESOURCE_TOPIC = 2
_ENDPOINT_BROKERS = 1


class Admin:
    """Topic and cluster administration. Use as ``async with Admin(bootstrap_servers=...) as admin:``."""

    def __init__(
        self,
        *,
        bootstrap_servers: str | Iterable[str] = "localhost:9092",
        client_id: str = "kafkakit-admin",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str = "PLAIN",
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: OAuthTokenProvider | None = None,
        sasl_oauth_extensions: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(client_id, str):
            raise KafkaConfigError("client_id", f"must be a string, got {client_id!r}")
        if (
            isinstance(request_timeout_ms, bool)
            or not isinstance(request_timeout_ms, int)
            or request_timeout_ms <= 0
        ):
            raise KafkaConfigError(
                "request_timeout_ms", f"must be a positive integer, got {request_timeout_ms!r}"
            )
        if (
            isinstance(retry_backoff_ms, bool)
            or not isinstance(retry_backoff_ms, int)
            or retry_backoff_ms < 0
        ):
            raise KafkaConfigError(
                "retry_backoff_ms", f"must be a non-negative integer, got {retry_backoff_ms!r}"
            )
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff = retry_backoff_ms / 1000
        self._metrics = Metrics() if metrics_enabled() else None
        # Describing a missing topic must never create it.
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
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
            network_metrics=None if self._metrics is None else NetworkMetrics(self._metrics),
        )
        self._started = False
        self._closed = False

    def metrics(self) -> dict[str, float]:
        """The connection-layer metrics (``request-rate``, ``request-latency-avg``, ``connection-count``...).

        Names as Kafka's admin client's; see docs/metrics.md. Empty when ``KAFKAKIT_METRICS=off``.
        """
        return self._metrics.snapshot() if self._metrics is not None else {}

    async def start(self) -> None:
        """Connect to the cluster."""
        if self._closed:
            raise IllegalStateError("a closed Admin cannot be restarted")
        if not self._started:
            await self._cluster.start()
            self._started = True

    async def close(self) -> None:
        """Close every connection."""
        if not self._closed:
            self._closed = True
            await self._cluster.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _check_running(self) -> None:
        if self._closed:
            raise IllegalStateError("the Admin client is closed")
        if not self._started:
            raise IllegalStateError("call await admin.start() first")

    # -- topics ------------------------------------------------------------

    async def create_topics(
        self, new_topics: Iterable[NewTopic], *, timeout_ms: int | None = None, validate_only: bool = False
    ) -> None:
        """Create topics and wait until their metadata is visible.

        Raises the typed error of the first topic that failed (e.g.
        TopicAlreadyExistsError); the other topics of the call were still created.
        """
        self._check_running()
        topics = list(new_topics)
        for topic in topics:
            _check_new_topic(topic)
        if not topics:
            return
        timeout_ms = self._request_timeout_ms if timeout_ms is None else timeout_ms
        request = {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
                }
                for t in topics
            ],
            "timeout": timeout_ms,
            "validate_only": validate_only,
        }
        response = await self._call_controller(ApiKey.CREATE_TOPICS, request, lambda r: r.topics)
        failures = _failures(response.topics)
        created = [t.name for t in topics if t.name not in failures]
        if created and not validate_only:
            await self._wait_for_topics(created, present=True, timeout=timeout_ms / 1000)
        _raise_first(failures, "creating")

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics and wait until they are gone from metadata.

        Raises the typed error of the first topic that failed (e.g.
        UnknownTopicOrPartitionError); the other topics of the call were still deleted.
        """
        self._check_running()
        if isinstance(names, str):
            raise TypeError("delete_topics() takes a list of topic names, not a string")
        names = list(names)
        if not all(isinstance(n, str) and n for n in names):
            raise TypeError("delete_topics() takes a list of topic names")
        if not names:
            return
        timeout_ms = self._request_timeout_ms if timeout_ms is None else timeout_ms
        request = {
            "topic_names": names,
            "topics": [{"name": n, "topic_id": None} for n in names],
            "timeout": timeout_ms,
        }
        response = await self._call_controller(ApiKey.DELETE_TOPICS, request, lambda r: r.responses)
        failures = _failures(response.responses)
        deleted = [n for n in names if n not in failures]
        if deleted:
            await self._wait_for_topics(deleted, present=False, timeout=timeout_ms / 1000)
        _raise_first(failures, "deleting")

    async def list_topics(self, *, include_internal: bool = False) -> set[str]:
        """Names of every topic (internal ones such as __consumer_offsets only when asked)."""
        self._check_running()
        response = await self._cluster.fetch_all_topics_metadata()
        return {
            t.name
            for t in response.topics
            if t.name is not None
            and not int(t.error_code)
            and (include_internal or not getattr(t, "is_internal", False))
        }

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Partitions, leaders and replicas of ``names`` (default: every non-internal topic).

        Raises UnknownTopicOrPartitionError (or the topic's typed error) for a
        topic that does not exist.
        """
        self._check_running()
        if names is None:
            response = await self._cluster.fetch_all_topics_metadata()
            topics = [
                t for t in response.topics if not getattr(t, "is_internal", False) and not int(t.error_code)
            ]
        else:
            if isinstance(names, str):
                raise TypeError("describe_topics() takes a list of topic names, not a string")
            wanted = list(names)
            response = await self._metadata(wanted)
            by_name = {t.name: t for t in response.topics}
            topics = []
            for name in wanted:
                topic = by_name.get(name)
                code = _UNKNOWN_TOPIC if topic is None else int(topic.error_code)
                if code:
                    raise for_code(code)(f"topic {name!r}")
                topics.append(topic)
        return sorted((_describe(t) for t in topics), key=lambda d: d.name)

    async def describe_configs(self, topic: str) -> dict[str, str]:
        """The effective configuration of ``topic`` (null values are left out)."""
        self._check_running()
        conn = await self._cluster.any_connection()
        response = await conn.call(
            ApiKey.DESCRIBE_CONFIGS,
            resources=[
                {"resource_type": _RESOURCE_TOPIC, "resource_name": topic, "configuration_keys": None}
            ],
            include_synonyms=False,
            include_documentation=False,
        )
        for result in response.results:
            if int(result.error_code):
                raise for_code(int(result.error_code))(
                    result.error_message or f"describing configs of {topic!r}"
                )
            return {c.name: c.value for c in result.configs if c.value is not None}
        raise UnknownTopicOrPartitionError(f"no configs returned for {topic!r}")

    # -- cluster -----------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and the brokers (DescribeCluster when the broker has it)."""
        self._check_running()
        conn = await self._cluster.any_connection()
        if conn.supports(ApiKey.DESCRIBE_CLUSTER):
            response = await conn.call(
                ApiKey.DESCRIBE_CLUSTER,
                include_cluster_authorized_operations=False,
                endpoint_type=_ENDPOINT_BROKERS,
            )
            if int(response.error_code):
                raise for_code(int(response.error_code))(response.error_message or "DescribeCluster")
            brokers = tuple(
                BrokerInfo(int(b.broker_id), b.host, int(b.port), b.rack) for b in response.brokers
            )
            return ClusterDescription(response.cluster_id, int(response.controller_id), _by_node(brokers))
        await self._cluster.refresh_metadata()
        meta = self._cluster.metadata
        return ClusterDescription(meta.cluster_id, meta.controller_id, _by_node(tuple(meta.brokers.values())))

    # -- helpers -----------------------------------------------------------

    # -- ACLs and SCRAM credentials ----------------------------------------

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Create ACLs; raises the typed error of the first one refused (the others were created)."""
        self._check_running()
        creations = [acls_module.creation(acl) for acl in acls]
        if not creations:
            return
        conn = await self._cluster.any_connection()
        response = await conn.call(ApiKey.CREATE_ACLS, creations=creations)
        for result in response.results:
            raise_for_code(int(result.error_code), result.error_message or "creating an ACL")

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs matching ``acl_filter`` (all of them by default)."""
        self._check_running()
        conn = await self._cluster.any_connection()
        response = await conn.call(ApiKey.DESCRIBE_ACLS, **(acl_filter or AclBindingFilter()).to_request())
        raise_for_code(int(response.error_code), response.error_message or "describing ACLs")
        return [
            acls_module.binding_from(int(r.resource_type), r.resource_name, int(r.pattern_type), acl)
            for r in response.resources
            for acl in r.acls
        ]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL matching any of ``filters``; returns the ACLs deleted."""
        self._check_running()
        requested = [f.to_request() for f in filters]
        if not requested:
            return []
        conn = await self._cluster.any_connection()
        response = await conn.call(ApiKey.DELETE_ACLS, filters=requested)
        deleted = []
        for result in response.filter_results:
            raise_for_code(int(result.error_code), result.error_message or "deleting ACLs")
            for match in result.matching_acls:
                raise_for_code(int(match.error_code), match.error_message or "deleting an ACL")
                deleted.append(
                    acls_module.binding_from(int(match.resource_type), match.resource_name, int(match.pattern_type), match)
                )
        return deleted

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """User -> their SCRAM credentials (mechanism, iterations); every user when ``users`` is None."""
        self._check_running()
        conn = await self._cluster.any_connection()
        wanted = None if users is None else [{"name": u} for u in users]
        response = await conn.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, users=wanted)
        raise_for_code(int(response.error_code), response.error_message or "describing SCRAM credentials")
        described: dict[str, list[ScramCredentialInfo]] = {}
        for result in response.results:
            raise_for_code(int(result.error_code), result.error_message or f"describing user {result.user!r}")
            described[result.user] = [
                ScramCredentialInfo(acls_module.mechanism_name(int(c.mechanism)), int(c.iterations))
                for c in result.credential_infos
            ]
        return described

    async def alter_user_scram_credentials(
        self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        """Create, replace or delete SCRAM credentials; raises the first user's error (others applied)."""
        self._check_running()
        changes = list(alterations)
        upsertions = [c.to_request() for c in changes if isinstance(c, UserScramCredentialUpsertion)]
        deletions = [c.to_request() for c in changes if isinstance(c, UserScramCredentialDeletion)]
        if len(upsertions) + len(deletions) != len(changes):
            raise TypeError("alter_user_scram_credentials() takes UserScramCredentialUpsertion/Deletion objects")
        if not changes:
            return
        conn = await self._cluster.any_connection()
        response = await conn.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, deletions=deletions, upsertions=upsertions)
        for result in response.results:
            raise_for_code(int(result.error_code), result.error_message or f"altering user {result.user!r}")

    async def _metadata(self, topics: list[str]) -> Any:
        conn = await self._cluster.any_connection()
        return await conn.call(
            ApiKey.METADATA,
            topics=[{"name": t, "topic_id": None} for t in topics],
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )

    async def _controller(self) -> BrokerConnection:
        await self._cluster.refresh_metadata()
        controller = self._cluster.metadata.controller_id
        if controller < 0:
            return await self._cluster.any_connection()  # e.g. a broker that does not report one
        return await self._cluster.connection(controller)

    async def _call_controller(self, api_key: int, fields: dict[str, Any], results: Any) -> Any:
        """Send to the controller; on NOT_CONTROLLER (or a lost connection) refresh and retry."""
        deadline = time.monotonic() + self._request_timeout_ms / 1000
        while True:
            try:
                conn = await self._controller()
                response = await conn.call(api_key, **fields)
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self._retry_backoff)
                continue
            if not any(int(r.error_code) == _NOT_CONTROLLER for r in results(response)):
                return response
            if time.monotonic() >= deadline:
                raise for_code(_NOT_CONTROLLER)("the controller kept moving")
            self._cluster.request_metadata_update()
            await asyncio.sleep(self._retry_backoff)

    async def _wait_for_topics(self, names: list[str], *, present: bool, timeout: float) -> None:
        """Poll metadata until every topic in ``names`` exists with leaders (or is gone)."""
        deadline = time.monotonic() + timeout
        backoff = 0.02
        while True:
            response = await self._metadata(names)
            by_name = {t.name: t for t in response.topics}
            if present:
                pending = [n for n in names if not _is_ready(by_name.get(n))]
            else:
                pending = [n for n in names if _exists(by_name.get(n))]
            if not pending:
                return
            if time.monotonic() >= deadline:
                state = "appear" if present else "disappear"
                raise KafkaTimeoutError(f"topics {pending} did not {state} in metadata within {timeout:.1f}s")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    # -- consumer groups, committed offsets, offset lookups (kafkakit.admin_groups) --

    def _group_admin(self) -> GroupAdmin:
        self._check_running()
        return GroupAdmin(
            self._cluster,
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=round(self._retry_backoff * 1000),
        )

    async def list_groups(self, types: Iterable[str] | None = None) -> list[GroupListing]:
        """Every group of the cluster (of ``types``, e.g. ``["consumer"]`` for KIP-848 groups), sorted by id."""
        return await self._group_admin().list_groups(types)

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """State, protocol and members (with assignments) of each group; a missing group has state ``Dead``.

        KIP-848 groups are described with ConsumerGroupDescribe (member epochs and target assignments)."""
        return await self._group_admin().describe_groups(group_ids)

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups and their offsets; raises the first refusal (NonEmptyGroupError, GroupIdNotFoundError)."""
        await self._group_admin().delete_groups(group_ids)

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of ``group_id`` (of ``partitions``, default all it has committed)."""
        return await self._group_admin().list_consumer_group_offsets(group_id, partitions)

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Set committed offsets of a group with no active members (the coordinator refuses a live group)."""
        await self._group_admin().alter_consumer_group_offsets(group_id, offsets)

    async def list_offsets(
        self, specs: Mapping[TopicPartition, OffsetSpec], *, isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Per partition, the offset of ``"earliest"``, ``"latest"`` or a timestamp in ms (-1: none at/after it)."""
        return await self._group_admin().list_offsets(specs, isolation_level=isolation_level)

    async def describe_config_entries(
        self, resource_name: str, *, resource_type: Literal["topic", "broker"] = "topic"
    ) -> list[ConfigEntry]:
        """Every config of a topic (or broker id) with its source; ``entry.is_override`` marks the resource's own."""
        return await self._group_admin().describe_config_entries(resource_name, resource_type=resource_type)

    async def incremental_alter_configs(
        self,
        resource_name: str,
        changes: Mapping[str, tuple[ConfigOperation, str | None]],
        *,
        resource_type: Literal["topic", "broker", "group"] = "topic",
        validate_only: bool = False,
    ) -> None:
        """Change configs of a topic (or broker, or group: ``share.auto.offset.reset``...) in place: ``{name: ("set", value) | ("delete", None) | ...}``.

        Raises the broker's typed error (e.g. InvalidConfigError, UnknownTopicOrPartitionError).
        """
        await self._group_admin().incremental_alter_configs(
            resource_name, changes, resource_type=resource_type, validate_only=validate_only
        )


    # -- share groups (KIP-932; kafkakit.admin_share_groups) ---------------------

    def _share_admin(self) -> ShareGroupAdmin:
        self._check_running()
        return ShareGroupAdmin(
            self._cluster,
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=round(self._retry_backoff * 1000),
        )

    async def describe_share_groups(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        """State, epochs and members (with assignments) of each share group; a missing one is ``Dead``."""
        return await self._share_admin().describe_share_groups(group_ids)

    async def list_share_groups(self) -> list[GroupListing]:
        """Every share group of the cluster, sorted by id."""
        return await self._share_admin().list_share_groups()

    async def delete_share_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty share groups with their state (NonEmptyGroupError while members remain)."""
        await self._share_admin().delete_share_groups(group_ids)

    async def describe_share_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, SharePartitionOffset]:
        """The share-partition start offset (and lag) of a share group per partition."""
        return await self._share_admin().describe_share_group_offsets(group_id, partitions)

    async def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Move the share-partition start offsets of an empty share group."""
        await self._share_admin().alter_share_group_offsets(group_id, offsets)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        """Forget an empty share group's state for ``topics``."""
        await self._share_admin().delete_share_group_offsets(group_id, topics)

def _check_new_topic(topic: Any) -> None:
    if not isinstance(topic, NewTopic):
        raise TypeError(f"create_topics() takes NewTopic items, got {topic!r}")
    if not topic.name or not isinstance(topic.name, str):
        raise KafkaConfigError("name", f"bad topic name {topic.name!r}")
    if topic.num_partitions < 1 and topic.num_partitions != -1:
        raise KafkaConfigError(
            "num_partitions", f"must be positive (or -1 for the broker default), got {topic.num_partitions}"
        )
    if topic.replication_factor < 1 and topic.replication_factor != -1:
        raise KafkaConfigError(
            "replication_factor",
            f"must be positive (or -1 for the broker default), got {topic.replication_factor}",
        )


def _failures(results: Any) -> dict[str, KafkaError]:
    failures: dict[str, KafkaError] = {}
    for r in results:
        code = int(r.error_code)
        if code:
            message = getattr(r, "error_message", None) or ""
            failures[r.name] = for_code(code)(f"topic {r.name!r}" + (f": {message}" if message else ""))
    return failures


def _raise_first(failures: dict[str, KafkaError], action: str) -> None:
    if not failures:
        return
    first = next(iter(failures.values()))
    if len(failures) > 1:
        first.add_note(
            f"{action} also failed for: " + ", ".join(f"{n} ({e})" for n, e in list(failures.items())[1:])
        )
    raise first


def _is_ready(topic: Any) -> bool:
    """A topic counts as present when metadata lists it without error and every partition has a leader."""
    if topic is None or int(topic.error_code) or not topic.partitions:
        return False
    return all(int(p.leader_id) >= 0 for p in topic.partitions)


def _exists(topic: Any) -> bool:
    return topic is not None and int(topic.error_code) != _UNKNOWN_TOPIC


def _describe(topic: Any) -> TopicDescription:
    partitions = tuple(
        sorted(
            (
                PartitionInfo(
                    topic.name,
                    int(p.partition_index),
                    int(p.leader_id),
                    tuple(int(r) for r in p.replica_nodes),
                    tuple(int(r) for r in p.isr_nodes),
                    int(getattr(p, "leader_epoch", -1)),
                )
                for p in topic.partitions
            ),
            key=lambda p: p.partition,
        )
    )
    return TopicDescription(
        topic.name, getattr(topic, "topic_id", None), bool(getattr(topic, "is_internal", False)), partitions
    )


def _by_node(brokers: tuple[BrokerInfo, ...]) -> tuple[BrokerInfo, ...]:
    return tuple(sorted(brokers, key=lambda b: b.node_id))
