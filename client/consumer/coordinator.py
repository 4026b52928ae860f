"""The group coordinator: finding it, the connection to it, and the error codes it answers.

Every request of a consumer group (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch) goes to one broker, the group's
coordinator. :class:`CoordinatorConnection` finds it with
:meth:`Cluster.find_coordinator <kafkakit.cluster.Cluster.find_coordinator>`
(the FindCoordinator retry loop the admin and the transactional producer use
too), keeps a dedicated connection to it (a JoinGroup long poll must never
stall Fetches) and forgets it when it moves, so the next request looks it up
again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaConnectionError, KafkaTimeoutError
from kafkakit.net.connection import BrokerConnection

log = logging.getLogger("kafkakit.consumer.group")  # one log for the group, whichever module writes

#: The FindCoordinator key type of a group.
GROUP_KEY_TYPE = 0

# Error codes of the group coordinator the group protocols react to.
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
UNSTABLE_OFFSET_COMMIT = 88
COORDINATOR_MOVED = {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
# INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, GROUP_AUTHORIZATION_FAILED,
# GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID.
FATAL_GROUP_ERRORS = {23, 24, 26, 30, 81, 82}


class CoordinatorSettings(Protocol):
    """What :class:`CoordinatorConnection` needs of a group member's settings (a consumer's
    ``GroupConfig``, a share consumer's settings)."""

    @property
    def group_id(self) -> str: ...

    @property
    def request_timeout_ms(self) -> int: ...

    @property
    def retry_backoff_ms(self) -> int: ...

    @property
    def api_timeout(self) -> float: ...


class CoordinatorConnection:
    """The connection to one group's coordinator, looked up when needed and dropped when it moves."""

    def __init__(self, cluster: Cluster, config: CoordinatorSettings) -> None:
        self._cluster = cluster
        self._config = config
        self._backoff = config.retry_backoff_ms / 1000
        self._api_timeout = config.api_timeout
        self._conn: BrokerConnection | None = None
        self._lookup: asyncio.Future[BrokerConnection] | None = None
        #: Connections being closed (the group's close/abort cancels and awaits them with its tasks).
        self.background: set[asyncio.Task[None]] = set()

    @property
    def conn(self) -> BrokerConnection | None:
        """The current connection to the coordinator (None: none yet, or dropped)."""
        return self._conn

    async def connection(self) -> BrokerConnection:
        """The connection to the group coordinator, looking it up (once for all callers) if needed."""
        conn = self._conn
        if conn is not None and conn.connected:
            return conn
        if self._lookup is None or self._lookup.done():
            self._lookup = asyncio.ensure_future(self._find())
        return await asyncio.shield(self._lookup)

    async def _find(self) -> BrokerConnection:
        async def connect(response: Any) -> BrokerConnection:
            return await self._connect(int(response.node_id), response.host, int(response.port))

        group_id = self._config.group_id
        return await self._cluster.find_coordinator(
            group_id,
            GROUP_KEY_TYPE,
            connect,
            what=f"group {group_id!r}",
            timeout=self._api_timeout,
            backoff=self._backoff,
        )

    async def _connect(self, node_id: int, host: str, port: int) -> BrokerConnection:
        conn = await self._cluster.open_connection(
            host, port, node_id=node_id, request_timeout_ms=self._config.request_timeout_ms
        )
        self._conn = conn
        log.debug("group %s: coordinator is broker %s at %s:%s", self._config.group_id, node_id, host, port)
        return conn

    def drop(self, reason: str) -> None:
        """Forget the coordinator (NOT_COORDINATOR, connection loss...): the next request looks it up again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            log.info("group %s: dropping coordinator %s: %s", self._config.group_id, conn.node_id, reason)
            task = asyncio.ensure_future(conn.close())
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def send(self, api_key: int, *, timeout: float | None = None, **fields: Any) -> Any:
        """One request to the coordinator; a lost connection drops the coordinator and re-raises."""
        conn = await self.connection()
        try:
            return await conn.send(conn.request(api_key, **fields), timeout=timeout)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            if self._conn is conn:
                self.drop(str(exc))
            raise
