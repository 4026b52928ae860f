"""Broker settings: one frozen dataclass, validated once at construction.

Keys are snake_case keyword arguments (``log_segment_bytes=...``); Kafka's
dotted names (``log.segment.bytes``) are accepted too, which is what the CLI's
``--config key=value`` passes.  Unknown keys and bad values raise
:class:`~kafkakit.errors.KafkaConfigError` naming the setting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kafkakit.errors import KafkaConfigError

MiB = 1024 * 1024
_LONG_MAX = 2**63 - 1
_DAY_MS = 24 * 3600 * 1000

# Kafka's own spellings whose snake_case form differs from ours.
_ALIASES = {
    "broker_id": "node_id",
    "log_flush_interval_messages": "log_flush_messages",
    "log_flush_interval_ms": "log_flush_ms",
    "log_roll_ms": "log_segment_ms",
    "log_retention_check_interval": "log_retention_check_interval_ms",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Every broker setting with Kafka's default."""

    node_id: int = 1
    cluster_id: str | None = None
    advertised_host: str | None = None
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 100 * MiB
    message_max_bytes: int = 1048588
    log_segment_bytes: int = 1024 * MiB
    log_segment_ms: int = 7 * _DAY_MS
    log_retention_ms: int = 7 * _DAY_MS
    log_retention_bytes: int = -1
    log_flush_messages: int = _LONG_MAX
    log_flush_ms: int = _LONG_MAX
    log_retention_check_interval_ms: int = 300_000
    # The log cleaner (compaction), Kafka's defaults; io.max.bytes.per.second is a double in
    # Kafka (Double.MAX_VALUE): an integer here, Long.MAX_VALUE = unlimited.
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_io_max_bytes_per_second: int = _LONG_MAX
    log_cleaner_dedupe_buffer_size: int = 128 * MiB
    # Kafka's default is 3000; a small delay lets a new group's first join finish fast.
    group_initial_rebalance_delay_ms: int = 100
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # KIP-848 consumer groups (Kafka's group.consumer.* names and defaults).
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_max_size: int = 2**31 - 1
    # Kafka's default is 50; one partition is plenty for a single node.
    offsets_topic_num_partitions: int = 1
    # KIP-227: how many incremental fetch sessions the broker keeps (0 disables them).
    max_incremental_fetch_session_cache_slots: int = 1000
    # The finalized ``transaction.version`` feature level advertised in ApiVersions (Kafka 4.x: 2).
    transaction_version: int = 2
    # KIP-932 share groups (Kafka's group.share.* defaults; a share group's own config overrides).
    group_share_record_lock_duration_ms: int = 30_000
    group_share_delivery_count_limit: int = 5
    group_share_partition_max_record_locks: int = 2000
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5000
    # -- cluster mode (KRaft, issue 13; docs/broker.md "Cluster mode"); unset = one node --------
    # Only combined nodes are built: process.roles=broker,controller (the default once voters are set).
    process_roles: str | None = None
    # ``1@127.0.0.1:9190,2@...``: the controller quorum; every node here is a voter.
    controller_quorum_voters: str | None = None
    controller_listener_names: str = "CONTROLLER"
    controller_quorum_election_timeout_ms: int = 1000
    controller_quorum_fetch_timeout_ms: int = 2000
    controller_quorum_election_backoff_max_ms: int = 1000
    controller_quorum_request_timeout_ms: int = 2000
    # The listener followers and coordinators use to reach other brokers (default: the first one).
    inter_broker_listener_name: str | None = None
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_backoff_ms: int = 1000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    offsets_topic_replication_factor: int = 3
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    # Records of the metadata log between two snapshots (Kafka counts bytes:
    # metadata.log.max.record.bytes.between.snapshots).
    metadata_snapshot_records: int = 20_000
    # Prometheus metrics over HTTP at /metrics on this port (0 = any free port); None = no metrics
    # at all (no instrumentation on the request path).  See broker_min/metrics.py.
    metrics_port: int | None = None

    # -- security (docs/broker.md "Security"); None = not set ---------------------------------
    # ``NAME://host:port,...``; unset, the broker has one PLAINTEXT listener on Broker(host, port).
    listeners: str | None = None
    advertised_listeners: str | None = None
    # Kafka's default maps each security protocol to itself.
    listener_security_protocol_map: str = (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    )
    # Kafka defaults both store types to JKS, which Python cannot read: PEM (or PKCS12) here.
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str | None = None
    ssl_keystore_password: str | None = None
    ssl_key_password: str | None = None
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str | None = None
    ssl_truststore_password: str | None = None
    ssl_client_auth: str = "none"
    # Kafka's default is GSSAPI, which broker_min does not implement: a SASL listener needs this set.
    sasl_enabled_mechanisms: str | None = None
    connections_max_reauth_ms: int = 0
    connection_failed_authentication_delay_ms: int = 100
    # "" = no authorizer (everyone may do everything, ACL requests answer SECURITY_DISABLED);
    # Kafka's StandardAuthorizer class name (or "standard") turns ACLs on.
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    # OAUTHBEARER: unset, tokens are unsecured JWS checked as Kafka's default validator does;
    # a ``file:`` URL or path of a JWKS file (or a PEM public key) makes signed tokens required.
    sasl_oauthbearer_jwks_endpoint_url: str | None = None
    sasl_oauthbearer_expected_audience: str | None = None
    sasl_oauthbearer_expected_issuer: str | None = None
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_scope_claim_name: str = "scope"
    sasl_oauthbearer_clock_skew_seconds: int = 30
    # Settings scoped to one listener, verbatim under Kafka's names:
    # ``listener.name.sasl_ssl.plain.sasl.jaas.config`` -> its value.
    listener_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        _check_range("node_id", self.node_id, 0)
        _check_range("num_partitions", self.num_partitions, 1)
        _check_range("default_replication_factor", self.default_replication_factor, 1, 2**15 - 1)
        if self.default_replication_factor != 1 and self.controller_quorum_voters is None:
            raise KafkaConfigError(
                "default_replication_factor", "a single-node broker only supports 1 (set controller.quorum.voters)"
            )
        self._check_cluster_settings()
        _check_range("socket_request_max_bytes", self.socket_request_max_bytes, 1024, 2**31 - 1)
        _check_range("message_max_bytes", self.message_max_bytes, 0, 2**31 - 1)
        _check_range("log_segment_bytes", self.log_segment_bytes, 14, 2**31 - 1)
        _check_range("log_segment_ms", self.log_segment_ms, 1)
        _check_range("log_retention_ms", self.log_retention_ms, -1)
        _check_range("log_retention_bytes", self.log_retention_bytes, -1)
        _check_range("log_flush_messages", self.log_flush_messages, 1)
        _check_range("log_flush_ms", self.log_flush_ms, 0)
        _check_range("log_retention_check_interval_ms", self.log_retention_check_interval_ms, 1)
        _check_range("log_cleaner_backoff_ms", self.log_cleaner_backoff_ms, 0)
        _check_range("log_cleaner_io_max_bytes_per_second", self.log_cleaner_io_max_bytes_per_second, 1)
        _check_range("log_cleaner_dedupe_buffer_size", self.log_cleaner_dedupe_buffer_size, 24)
        _check_range("group_initial_rebalance_delay_ms", self.group_initial_rebalance_delay_ms, 0)
        _check_range("group_min_session_timeout_ms", self.group_min_session_timeout_ms, 0, 2**31 - 1)
        _check_range(
            "group_max_session_timeout_ms",
            self.group_max_session_timeout_ms,
            self.group_min_session_timeout_ms,
            2**31 - 1,
        )
        _check_range("group_consumer_session_timeout_ms", self.group_consumer_session_timeout_ms, 1, 2**31 - 1)
        _check_range("group_consumer_heartbeat_interval_ms", self.group_consumer_heartbeat_interval_ms, 1, 2**31 - 1)
        _check_range("group_consumer_max_size", self.group_consumer_max_size, 1, 2**31 - 1)
        _check_range("offsets_topic_num_partitions", self.offsets_topic_num_partitions, 1, 2**31 - 1)
        _check_range("transaction_version", self.transaction_version, 0, 2)
        _check_range("group_share_record_lock_duration_ms", self.group_share_record_lock_duration_ms, 100, 3_600_000)
        _check_range("group_share_delivery_count_limit", self.group_share_delivery_count_limit, 2, 10)
        _check_range("group_share_partition_max_record_locks", self.group_share_partition_max_record_locks, 1, 10**6)
        _check_range("group_share_session_timeout_ms", self.group_share_session_timeout_ms, 100, 2**31 - 1)
        _check_range("group_share_heartbeat_interval_ms", self.group_share_heartbeat_interval_ms, 10, 2**31 - 1)
        _check_range(
            "max_incremental_fetch_session_cache_slots", self.max_incremental_fetch_session_cache_slots, 0, 2**31 - 1
        )
        if self.metrics_port is not None:
            _check_range("metrics_port", self.metrics_port, 0, 65535)
        if self.cluster_id is not None and not self.cluster_id:
            raise KafkaConfigError("cluster_id", "must not be empty")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise KafkaConfigError("ssl.client.auth", f"expected none, requested or required, got {self.ssl_client_auth!r}")
        _check_range("connections_max_reauth_ms", self.connections_max_reauth_ms, 0)
        _check_range(
            "connection_failed_authentication_delay_ms", self.connection_failed_authentication_delay_ms, 0
        )
        _check_range("sasl_oauthbearer_clock_skew_seconds", self.sasl_oauthbearer_clock_skew_seconds, 0)
        for key in self.listener_settings:
            if not key.startswith(LISTENER_PREFIX):
                raise KafkaConfigError(key, f"listener settings start with {LISTENER_PREFIX!r}")
        object.__setattr__(self, "listener_settings", MappingProxyType(dict(self.listener_settings)))

    @property
    def cluster_mode(self) -> bool:
        """Whether this node is one of a KRaft quorum (``controller.quorum.voters`` is set)."""
        return self.controller_quorum_voters is not None

    def controller_listener_set(self) -> frozenset[str]:
        """``controller.listener.names`` upper-cased: listeners the quorum serves, not the broker."""
        return frozenset(n.strip().upper() for n in self.controller_listener_names.split(",") if n.strip())

    def _check_cluster_settings(self) -> None:
        for name in (
            "controller_quorum_election_timeout_ms",
            "controller_quorum_fetch_timeout_ms",
            "controller_quorum_request_timeout_ms",
            "broker_session_timeout_ms",
            "broker_heartbeat_interval_ms",
            "replica_lag_time_max_ms",
            "replica_fetch_max_bytes",
            "leader_imbalance_check_interval_seconds",
            "metadata_snapshot_records",
        ):
            _check_range(name, getattr(self, name), 1, 2**31 - 1)
        for name in ("controller_quorum_election_backoff_max_ms", "replica_fetch_wait_max_ms", "replica_fetch_backoff_ms"):
            _check_range(name, getattr(self, name), 0, 2**31 - 1)
        for name in (
            "min_insync_replicas",
            "offsets_topic_replication_factor",
            "transaction_state_log_replication_factor",
            "transaction_state_log_min_isr",
        ):
            _check_range(name, getattr(self, name), 1, 2**15 - 1)
        if self.process_roles is not None:
            roles = {r.strip() for r in self.process_roles.split(",") if r.strip()}
            if roles != {"broker", "controller"}:
                raise KafkaConfigError(
                    "process.roles",
                    f"only combined nodes (broker,controller) are supported yet, got {self.process_roles!r}",
                )
            if self.controller_quorum_voters is None:
                raise KafkaConfigError("controller.quorum.voters", "process.roles needs the controller quorum voters")
        if self.controller_quorum_voters is not None and self.cluster_id is None:
            # Kafka formats every node's storage with one cluster id (kafka-storage format -t ID);
            # voters refuse requests from another cluster, so a node cannot invent its own.
            raise KafkaConfigError("cluster.id", "cluster mode needs the same cluster.id on every node")
        if self.controller_quorum_voters is not None:
            from kafkakit.broker.raft.config import parse_voters  # the raft layer owns the voter syntax

            try:
                voters = parse_voters(self.controller_quorum_voters)
            except ValueError as exc:
                raise KafkaConfigError("controller.quorum.voters", str(exc)) from None
            if self.node_id not in voters:
                raise KafkaConfigError(
                    "node.id", f"node {self.node_id} is not one of controller.quorum.voters {sorted(voters)}"
                )

    def listener_setting(self, listener: str, key: str) -> str | None:
        """``listener.name.<listener>.<key>`` (listener names are case-insensitive, as in Kafka)."""
        return self.listener_settings.get(f"{LISTENER_PREFIX}{listener.lower()}.{key}")

    def super_user_set(self) -> frozenset[str]:
        """``super.users`` as principals (``User:admin``), semicolon-separated as in Kafka."""
        return frozenset(p.strip() for p in self.super_users.split(";") if p.strip())

    @classmethod
    def from_kwargs(cls, **settings: Any) -> BrokerConfig:
        """Build from keyword settings, accepting Kafka's dotted names as well."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        scoped = _take_listener_settings(settings, values)
        for key, value in settings.items():
            if key in scoped:
                continue
            name = normalise_key(key)
            if name not in known:
                raise KafkaConfigError(key, "unknown broker setting")
            values[name] = value
        return cls(**values)

    @classmethod
    def from_strings(cls, pairs: dict[str, str]) -> BrokerConfig:
        """Build from ``key -> text`` pairs (the CLI's ``--config key=value``), converting types."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        scoped = _take_listener_settings(pairs, values)
        for key, text in pairs.items():
            if key in scoped:
                continue
            name = normalise_key(key)
            if name not in types:
                raise KafkaConfigError(key, "unknown broker setting")
            values[name] = _parse(name, text, str(types[name]))
        return cls(**values)

    def overridden(self) -> set[str]:
        """Names of the settings that differ from Kafka's defaults (DescribeConfigs reports them as static)."""
        default = BrokerConfig()
        return {f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(default, f.name)}


LISTENER_PREFIX = "listener.name."

#: Settings whose values DescribeConfigs must not reveal (Kafka marks them sensitive).
SENSITIVE_SETTINGS = frozenset(
    {"ssl_keystore_password", "ssl_key_password", "ssl_truststore_password", "listener_settings"}
)


def _take_listener_settings(settings: Mapping[str, Any], values: dict[str, Any]) -> set[str]:
    """Move ``listener.name.*`` keys (kept verbatim, lower-cased listener name) into ``values``."""
    scoped: dict[str, str] = dict(values.get("listener_settings") or settings.get("listener_settings") or {})
    taken = {"listener_settings"} & set(settings)
    for key, value in settings.items():
        if key.lower().startswith(LISTENER_PREFIX):
            name, _, rest = key[len(LISTENER_PREFIX) :].partition(".")
            if not name or not rest:
                raise KafkaConfigError(key, "expected listener.name.<listener>.<setting>")
            if not isinstance(value, str):
                raise KafkaConfigError(key, f"expected a string, got {type(value).__name__}")
            scoped[f"{LISTENER_PREFIX}{name.lower()}.{rest}"] = value
            taken.add(key)
    if taken:
        values["listener_settings"] = scoped
    return taken


def normalise_key(key: str) -> str:
    """``log.segment.bytes`` / ``log-segment-bytes`` -> ``log_segment_bytes`` (with Kafka's aliases)."""
    name = key.strip().replace(".", "_").replace("-", "_").lower()
    return _ALIASES.get(name, name)


def _check_type(name: str, value: Any, annotation: Any) -> None:
    text = str(annotation)
    if text == "bool":
        ok = isinstance(value, bool)
    elif text == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif text == "int | None":
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
    elif text == "str | None":
        ok = value is None or isinstance(value, str)
    elif text == "str":
        ok = isinstance(value, str)
    elif text == "Mapping[str, str]":
        ok = isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    else:  # pragma: no cover - a new field type needs a branch here
        raise AssertionError(f"unhandled setting type {text} for {name}")
    if not ok:
        raise KafkaConfigError(name, f"expected {text}, got {type(value).__name__} {value!r}")


def _check_range(name: str, value: int, low: int, high: int = _LONG_MAX) -> None:
    if not low <= value <= high:
        raise KafkaConfigError(name, f"must be between {low} and {high}, got {value}")


def _parse(name: str, text: str, annotation: str) -> Any:
    if annotation == "bool":
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise KafkaConfigError(name, f"expected true or false, got {text!r}")
        return lowered == "true"
    if annotation == "int | None" and text.strip().lower() in ("", "none"):
        return None
    if annotation in ("int", "int | None"):
        try:
            return int(text.strip())
        except ValueError:
            raise KafkaConfigError(name, f"expected an integer, got {text!r}") from None
    return text
