"""The broker side of the controller APIs: send a request to whichever voter is the active controller.

Kafka's NodeToControllerChannelManager: the active controller is the quorum leader, which
the local Raft node knows (it follows the leader). :class:`ControllerChannel` sends the
request there over its own connections (a :class:`~kafkakit.broker.raft.RaftPeers`, so
reconnects and per-request timeouts come with it), and retries after a connection error,
a timeout or a NOT_CONTROLLER answer, at the then-current leader, until its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from kafkakit.broker.raft import RaftNode, RaftPeers, Voter

from .rpc import not_controller

log = logging.getLogger("kafkakit.broker.controller")

#: Kafka's controller channel retries until the request's own timeout (30 s by default).
DEFAULT_TIMEOUT = 30.0
DEFAULT_REQUEST_TIMEOUT = 5.0
RETRY_BACKOFF = 0.05


class ControllerChannel:
    """Sends kio requests to the active controller and returns its responses."""

    def __init__(
        self,
        raft: RaftNode,
        voters: Mapping[int, Voter],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.raft = raft
        self.timeout = timeout
        self.request_timeout = request_timeout
        self._peers = RaftPeers(voters)

    async def send(self, request: Any, timeout: float | None = None) -> Any:
        """The active controller's response to ``request`` (TimeoutError after ``timeout`` seconds).

        A request may reach the controller more than once (a lost answer is retried), as in Kafka.
        """
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        last_problem = "no leader"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no answer from the active controller within {budget:.1f}s ({last_problem})"
                )
            leader = self.raft.leader_and_epoch().leader_id
            if leader is None:
                try:
                    leader = (await self.raft.wait_for_leader(remaining)).leader_id
                except TimeoutError:
                    continue
                if leader is None:
                    continue
            try:
                response = await self._peers.send(leader, request, min(remaining, self.request_timeout))
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                last_problem = f"node {leader}: {exc!r}"
                log.debug("controller channel: %s", last_problem)
            else:
                if not not_controller(response):
                    return response
                last_problem = f"node {leader} is not the active controller"
            await asyncio.sleep(min(RETRY_BACKOFF, max(deadline - time.monotonic(), 0)))

    async def close(self) -> None:
        """Drop the connections."""
        await self._peers.close()
