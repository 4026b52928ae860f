"""The producer's settings: checked up front, each error naming its setting (KafkaConfigError)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkakit.cluster import parse_bootstrap
from kafkakit.config import check_int as _check_int
from kafkakit.errors import KafkaConfigError
from kafkakit.producer.record_input import check_acks

#: The broker keeps the last five batches per producer and partition for deduplication.
MAX_IDEMPOTENT_IN_FLIGHT = 5


def check_settings(
    *,
    bootstrap_servers: str | Sequence[str],
    client_id: str,
    acks: int | str | None,
    enable_idempotence: bool | None,
    transactional_id: str | None,
    transaction_timeout_ms: int,
    max_block_ms: int,
    linger_ms: int,
    max_batch_size: int,
    max_request_size: int,
    buffer_memory: int,
    request_timeout_ms: int,
    delivery_timeout_ms: int,
    retry_backoff_ms: int,
    metadata_max_age_ms: int,
    max_in_flight_requests_per_connection: int,
    callables: dict[str, Any],
) -> tuple[bool, int]:
    """Check the Producer's settings; returns (idempotence on, acks as -1/0/1) after the defaults resolve."""
    parse_bootstrap(bootstrap_servers)  # raises KafkaConfigError("bootstrap_servers", ...)
    if not isinstance(client_id, str) or not client_id:
        raise KafkaConfigError("client_id", f"must be a non-empty string, not {client_id!r}")
    if enable_idempotence is not None and not isinstance(enable_idempotence, bool):
        raise KafkaConfigError("enable_idempotence", f"must be a bool or None, not {enable_idempotence!r}")
    if transactional_id is not None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise KafkaConfigError(
                "transactional_id", f"must be a non-empty string or None, not {transactional_id!r}"
            )
        enable_idempotence = True  # transactions are built on idempotence
    _check_int("transaction_timeout_ms", transaction_timeout_ms, 1)
    _check_int("max_block_ms", max_block_ms, 0)
    if enable_idempotence is None:
        # As in modern Kafka clients: on with acks="all" unless a setting conflicts.
        enable_idempotence = (
            acks in ("all", -1) and max_in_flight_requests_per_connection <= MAX_IDEMPOTENT_IN_FLIGHT
        )
    if acks is None:
        acks = "all" if enable_idempotence else 1
    acks_code = check_acks(acks)
    if enable_idempotence and acks_code != -1:
        raise KafkaConfigError(
            "acks", f"must be 'all' (-1) with enable_idempotence or transactional_id, got {acks!r}"
        )
    _check_int("linger_ms", linger_ms, 0)
    _check_int("max_batch_size", max_batch_size, 1)
    _check_int("max_request_size", max_request_size, 1)
    _check_int("buffer_memory", buffer_memory, 1)
    _check_int("request_timeout_ms", request_timeout_ms, 1)
    _check_int("delivery_timeout_ms", delivery_timeout_ms, 1)
    _check_int("retry_backoff_ms", retry_backoff_ms, 0)
    _check_int("metadata_max_age_ms", metadata_max_age_ms, 0)
    _check_int("max_in_flight_requests_per_connection", max_in_flight_requests_per_connection, 1)
    if enable_idempotence and max_in_flight_requests_per_connection > MAX_IDEMPOTENT_IN_FLIGHT:
        raise KafkaConfigError(
            "max_in_flight_requests_per_connection",
            f"must be at most {MAX_IDEMPOTENT_IN_FLIGHT} with idempotence, got {max_in_flight_requests_per_connection}",
        )
    if delivery_timeout_ms < linger_ms + request_timeout_ms:
        raise KafkaConfigError(
            "delivery_timeout_ms",
            f"must be at least linger_ms + request_timeout_ms ({linger_ms + request_timeout_ms}), got {delivery_timeout_ms}",
        )
    for name, fn in callables.items():
        if fn is not None and not callable(fn):
            raise KafkaConfigError(name, f"must be callable, not {type(fn).__name__}")
    return bool(enable_idempotence), acks_code
