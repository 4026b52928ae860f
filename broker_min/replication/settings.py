"""The replica manager's settings (Kafka's replica.* broker settings and min.insync.replicas)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationSettings:
    """Kafka's defaults; ``min_insync_replicas`` is the broker default that a topic's
    ``min.insync.replicas`` config overrides."""

    #: A follower that has not caught up to the leader's log end for this long leaves the ISR.
    replica_lag_time_max_ms: int = 30_000
    #: How long a follower's Fetch waits at the leader for new data.
    replica_fetch_wait_max_ms: int = 500
    #: Bytes a follower asks for per partition in one Fetch.
    replica_fetch_max_bytes: int = 1024 * 1024
    #: Pause after a failed fetch (connection error, partition error) before the next try.
    replica_fetch_backoff_ms: int = 1000
    min_insync_replicas: int = 1
    #: The listener (its name in the brokers' registrations) followers use to reach leaders.
    inter_broker_listener: str = "PLAINTEXT"
    #: Kafka's replica.fetch.response.max.bytes: the bound of one whole Fetch answer.
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    #: Kafka's replica.high.watermark.checkpoint.interval.ms.
    high_watermark_checkpoint_interval_ms: int = 5000
    #: How long a follower waits for a leader's answer beyond the fetch wait (replica.socket.timeout.ms).
    replica_socket_timeout_ms: int = 30_000

    @classmethod
    def from_config(cls, config: Any) -> ReplicationSettings:
        """The settings of a :class:`~kafkakit.broker.config.BrokerConfig` (its replica_* fields,
        min_insync_replicas and inter_broker_listener_name, when it has them)."""
        defaults = cls()
        listener = getattr(config, "inter_broker_listener_name", None) or defaults.inter_broker_listener
        return cls(
            replica_lag_time_max_ms=getattr(config, "replica_lag_time_max_ms", defaults.replica_lag_time_max_ms),
            replica_fetch_wait_max_ms=getattr(
                config, "replica_fetch_wait_max_ms", defaults.replica_fetch_wait_max_ms
            ),
            replica_fetch_max_bytes=getattr(config, "replica_fetch_max_bytes", defaults.replica_fetch_max_bytes),
            replica_fetch_backoff_ms=getattr(config, "replica_fetch_backoff_ms", defaults.replica_fetch_backoff_ms),
            min_insync_replicas=getattr(config, "min_insync_replicas", defaults.min_insync_replicas),
            inter_broker_listener=str(listener).upper(),
        )
