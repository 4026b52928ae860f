"""What a Spark read task needs besides its offset range: small and free of pyarrow.

The source's driver-side code (Spark's streaming source runner, the planner) builds
these and pickles them into every InputPartition; only the tasks import the reader
(:mod:`kafkakit.spark.reader`) with pyarrow and the columnar decoder, so a runner's
fresh interpreter does not pay for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kafkakit.spark.security import SecurityOptions

#: Consumer settings (kafkakit keyword names) the reader uses; other accepted ones are ignored.
CONNECTION_SETTINGS = (
    "client_id",
    "request_timeout_ms",
    "retry_backoff_ms",
    "metadata_max_age_ms",
    "connections_max_idle_ms",
)


@dataclass(frozen=True)
class FetchSettings:
    """What a read needs besides its range; part of every InputPartition (so picklable)."""

    bootstrap_servers: str
    isolation_level: str = "read_committed"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 8388608
    check_crcs: bool = True
    #: How long a task waits for records that should exist before it gives up (kafkaConsumer.pollTimeoutMs).
    poll_timeout_ms: int = 120000
    #: Connection settings as Consumer keyword arguments.
    connection: dict[str, Any] = field(default_factory=dict)
    #: TLS/SASL options as strings; the SSLContext is built in each worker.
    security: SecurityOptions = field(default_factory=SecurityOptions)
