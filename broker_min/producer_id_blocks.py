"""Producer ids in cluster mode: blocks handed out by the controller (AllocateProducerIds, key 67).

On a single node :class:`~kafkakit.broker.producer_state.ProducerIdAllocator` reserves blocks in
a local file. In a cluster every broker hands out ids, so the blocks come from the controller,
which records each in the metadata log (ProducerIdsRecord) and never gives one out twice, as
Kafka's RPCProducerIdManager does. The allocation API stays synchronous (InitProducerId and the
transaction coordinator call it inline): a background task keeps one spare block ready, and
:class:`ProducerIdsUnavailableError` (answered as COORDINATOR_LOAD_IN_PROGRESS, which clients
retry) covers the moment before the first block arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from kafkakit.broker.producer_state import ProducerIdsUnavailableError
from kafkakit.broker.state import ControllerForwarder
from kafkakit.protocol.build import make_request
from kio.schema.errors import ErrorCode

log = logging.getLogger("kafkakit.broker")

ALLOCATE_PRODUCER_IDS = 67
_RETRY_BACKOFF = 0.5


class ControllerIdBlocks:
    """A :class:`~kafkakit.broker.producer_state.ProducerIdBlockSource` fed by the controller."""

    def __init__(self, channel: ControllerForwarder, node_id: int, broker_epoch: Callable[[], int]) -> None:
        self._channel = channel
        self._node_id = node_id
        self._broker_epoch = broker_epoch
        self._blocks: deque[tuple[int, int]] = deque()
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start keeping a spare block in hand."""
        self._wanted.set()
        self._task = asyncio.get_running_loop().create_task(self._refill(), name="kafkakit-producer-id-blocks")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def take_block(self) -> tuple[int, int]:
        """The next block; :class:`ProducerIdsUnavailableError` before the first one arrived."""
        self._wanted.set()
        if not self._blocks:
            raise ProducerIdsUnavailableError("no producer id block from the controller yet")
        return self._blocks.popleft()

    async def _refill(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while not self._blocks:
                block = await self._allocate()
                if block is None:
                    await asyncio.sleep(_RETRY_BACKOFF)
                    continue
                self._blocks.append(block)

    async def _allocate(self) -> tuple[int, int] | None:
        epoch = self._broker_epoch()
        if epoch < 0:
            return None  # not registered yet
        request = make_request(ALLOCATE_PRODUCER_IDS, 0, broker_id=self._node_id, broker_epoch=epoch)
        try:
            response = await self._channel.send(request, 10.0)
        except (TimeoutError, ConnectionError) as exc:
            log.debug("AllocateProducerIds failed: %r", exc)
            return None
        if response.error_code != ErrorCode.none:
            log.debug("AllocateProducerIds answered %s", response.error_code)
            return None
        start = int(response.producer_id_start)
        return start, start + int(response.producer_id_len)
