"""The transactional producer's coordinators: finding them, one connection each, and requests to them.

A transactional producer talks to two kinds of coordinator: the transaction
coordinator of its transactional id (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn) and the group coordinator of a consumer group
(TxnOffsetCommit). :class:`Coordinators` finds each with
:meth:`Cluster.find_coordinator <kafkakit.cluster.Cluster.find_coordinator>`
(the FindCoordinator retry loop the consumer and the admin use too), keeps one
connection per (key type, key), and retries a request while its coordinator
moves, loads or is busy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaError, KafkaTimeoutError, for_code
from kafkakit.net.connection import BrokerConnection
from kafkakit.producer.idempotence import FENCING_CODES, fenced_error
from kafkakit.producer.transaction_versions import TRANSACTION_VERSION_1, choose_version
from kafkakit.protocol.build import make_request

log = logging.getLogger("kafkakit.producer.transactions")  # the transactions' log, as before the move

GROUP_KEY = 0
TRANSACTION_KEY = 1
_COORDINATOR_MOVED = frozenset({14, 15, 16})  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_CONCURRENT_TRANSACTIONS = 51
_NOT_ATTEMPTED = 55  # OPERATION_NOT_ATTEMPTED: another partition of the request failed
#: CONCURRENT_TRANSACTIONS clears within milliseconds (markers being written): retry quickly.
_CONCURRENT_BACKOFF = 0.02


class Coordinators:
    """Keeps one connection per (key type, key) to its coordinator, found with Cluster.find_coordinator."""

    def __init__(self, cluster: Cluster, request_timeout_ms: int) -> None:
        self._cluster = cluster
        self._request_timeout_ms = request_timeout_ms
        self._conns: dict[tuple[int, str], BrokerConnection] = {}
        self.hints: dict[tuple[int, str], tuple[str, int]] = {}

    async def connection(
        self, key_type: int, key: str, *, timeout: float = 0.0, backoff: float = 0.0
    ) -> BrokerConnection:
        """The connection to the coordinator of ``key``: at its known address, else looked up.

        The lookup retries what is retriable for ``timeout`` seconds, every
        ``backoff`` (0: one attempt); out of time, it raises the last error.
        """
        conn = self._conns.get((key_type, key))
        if conn is not None and conn.connected:
            return conn
        hint = self.hints.get((key_type, key))
        if hint is None:
            conn = await self._find(key_type, key, timeout=timeout, backoff=backoff)
        else:
            conn = await self._open(key_type, key, hint)
        self._conns[(key_type, key)] = conn
        return conn

    async def _open(self, key_type: int, key: str, address: tuple[str, int]) -> BrokerConnection:
        try:
            return await self._cluster.open_connection(
                address[0], address[1], request_timeout_ms=self._request_timeout_ms
            )
        except KafkaError:
            self.hints.pop((key_type, key), None)
            raise

    async def _find(self, key_type: int, key: str, *, timeout: float, backoff: float) -> BrokerConnection:
        async def connect(response: Any) -> BrokerConnection:
            address = (str(response.host), int(response.port))
            self.hints[(key_type, key)] = address
            return await self._open(key_type, key, address)

        try:
            return await self._cluster.find_coordinator(
                key, key_type, connect, what=f"{key!r} (key type {key_type})", timeout=timeout, backoff=backoff
            )
        except KafkaTimeoutError as exc:
            if not isinstance(exc.__cause__, KafkaError):
                raise
            last = exc.__cause__
        # Out of time: the caller's retry loop reports the last error under its own deadline.
        raise last

    def drop(self, key_type: int, key: str, reason: str) -> None:
        self.hints.pop((key_type, key), None)
        conn = self._conns.pop((key_type, key), None)
        if conn is not None:
            log.info("dropping coordinator %s:%s for %r: %s", conn.host, conn.port, key, reason)
            asyncio.ensure_future(conn.close())

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def call(
        self,
        key_type: int,
        key: str,
        api_key: int,
        codes_of: Callable[[Any], Iterable[int]],
        *,
        what: str,
        timeout: float,
        backoff: float,
        transaction_version: int = TRANSACTION_VERSION_1,
        **fields: Any,
    ) -> Any:
        """Send one request to the coordinator of ``key``, retrying what is retriable.

        Returns the response when ``codes_of`` finds no error; raises the first
        non-retriable error's typed exception (fencing codes as ProducerFencedError).
        The request version is the highest ``transaction_version`` allows.
        """
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            delay = backoff
            try:
                # The lookup stops where this loop would give up (before another backoff).
                lookup_timeout = max(0.0, deadline - time.monotonic() - backoff)
                conn = await self.connection(key_type, key, timeout=lookup_timeout, backoff=backoff)
                version = choose_version(conn, api_key, transaction_version)
                response = await conn.send(make_request(api_key, version, **fields))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self.drop(key_type, key, str(exc))
                last = exc
            else:
                codes = [int(c) for c in codes_of(response) if int(c)]
                real = [c for c in codes if c != _NOT_ATTEMPTED] or codes
                if not real:
                    return response
                code = real[0]
                if code in FENCING_CODES:
                    raise fenced_error(code, what)
                error = for_code(code)(what)
                if code in _COORDINATOR_MOVED:
                    self.drop(key_type, key, str(error))
                elif code == _CONCURRENT_TRANSACTIONS:
                    delay = _CONCURRENT_BACKOFF
                elif not error.retriable:
                    raise error
                last = error
            if time.monotonic() + delay >= deadline:
                raise KafkaTimeoutError(f"{what}: gave up after {timeout:.0f}s; last error: {last}") from last
            await asyncio.sleep(delay)
