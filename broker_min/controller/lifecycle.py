"""A broker's registration and heartbeats with the active controller (Kafka's BrokerLifecycleManager).

:class:`BrokerLifecycle` registers the broker (BrokerRegistration v4, retried until it
succeeds), then heartbeats (BrokerHeartbeat v1) every ``broker.heartbeat.interval.ms``
with its metadata offset. The controller keeps a new registration fenced until the broker's
metadata image has reached the registration record; while fenced or shutting down the
broker heartbeats every 100 ms at most, so it is unfenced (or released) quickly.

The first heartbeat answer with ``is_caught_up`` (the broker's image has replayed up to its own
RegisterBrokerRecord, hence everything the controller had written before this incarnation
registered) completes the initial catch-up (Kafka's ``initialCatchUpFuture``): :meth:`wait_caught_up`
returns and ``on_caught_up`` is called, once per incarnation, whatever happens after (a later
fencing does not undo it). The broker opens its listeners to requests then.
:meth:`BrokerLifecycle.controlled_shutdown` asks to shut down (``want_shut_down``) until
the controller answers ``should_shut_down``: by then it has moved every leadership away.

A STALE_BROKER_EPOCH answer (another registration replaced this one) makes it register
again; other errors are retried at the next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence

from kafkakit.protocol.build import make_request
from kio.schema.errors import ErrorCode

from .channel import ControllerChannel
from .rpc import BROKER_HEARTBEAT, BROKER_REGISTRATION

log = logging.getLogger("kafkakit.broker.controller")

#: (listener name, host, port, security protocol id) as BrokerRegistration carries them.
Listener = tuple[str, str, int, int]
_FAST_HEARTBEAT = 0.1


class BrokerLifecycle:
    """Registers a broker with the controller and keeps its session alive."""

    def __init__(
        self,
        channel: ControllerChannel,
        node_id: int,
        cluster_id: str,
        listeners: Sequence[Listener],
        current_offset: Callable[[], int],
        heartbeat_interval_ms: int = 2000,
        *,
        rack: str | None = None,
        incarnation_id: uuid.UUID | None = None,
        on_caught_up: Callable[[], None] | None = None,
    ) -> None:
        self.channel = channel
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.listeners = list(listeners)
        self.current_offset = current_offset
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.rack = rack
        self.incarnation_id = incarnation_id or uuid.uuid4()
        #: The epoch the controller gave the current registration (-1: not registered).
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self.should_shut_down = False
        #: The last error the controller answered (registration or heartbeat), none when fine.
        self.last_error = ErrorCode.none
        self._want_shut_down = False
        self._unfenced = asyncio.Event()
        self._on_caught_up = on_caught_up
        self._initial_catch_up = asyncio.Event()
        self._released = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Register and heartbeat in a background task."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"broker-lifecycle-{self.node_id}"
            )

    async def stop(self) -> None:
        """Stop heartbeating (the controller fences the broker after its session timeout)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def wait_unfenced(self, timeout: float) -> None:
        """Wait until the controller unfenced this broker (TimeoutError after ``timeout`` seconds)."""
        async with asyncio.timeout(timeout):
            await self._unfenced.wait()

    async def wait_caught_up(self, timeout: float) -> None:
        """Wait until the controller first acknowledged this broker's image as caught up
        (TimeoutError after ``timeout`` seconds)."""
        async with asyncio.timeout(timeout):
            await self._initial_catch_up.wait()

    async def controlled_shutdown(self, timeout: float) -> None:
        """Ask the controller to move leadership away, and wait until it lets the broker go."""
        self._want_shut_down = True
        self._wake.set()
        if self._task is None or self._task.done():
            return
        async with asyncio.timeout(timeout):
            await self._released.wait()

    # -- the loop --------------------------------------------------------------------------------

    @property
    def _request_timeout(self) -> float:
        return max(2 * self.heartbeat_interval, 1.0)

    async def _run(self) -> None:
        while not self.should_shut_down:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                else:
                    await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except TimeoutError as exc:
                log.info("broker %d: controller did not answer: %s", self.node_id, exc)
            except Exception:
                log.exception("broker %d: lifecycle request failed", self.node_id)
            if self.should_shut_down:
                break
            quick = self.fenced or self._want_shut_down or self.broker_epoch < 0
            delay = min(self.heartbeat_interval, _FAST_HEARTBEAT) if quick else self.heartbeat_interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            self._wake.clear()

    async def _register(self) -> None:
        request = make_request(
            BROKER_REGISTRATION,
            4,
            broker_id=self.node_id,
            cluster_id=self.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[
                {"name": name, "host": host, "port": port, "security_protocol": protocol}
                for name, host, port, protocol in self.listeners
            ],
            features=[],
            rack=self.rack,
            is_migrating_zk_broker=False,
            log_dirs=[],
            previous_broker_epoch=-1,
        )
        response = await self.channel.send(request, self._request_timeout)
        self.last_error = ErrorCode(int(response.error_code))
        if self.last_error is not ErrorCode.none:
            log.warning("broker %d: registration refused: %s", self.node_id, self.last_error.name)
            return
        self.broker_epoch = int(response.broker_epoch)
        self._set_fenced(True)
        log.info("broker %d: registered with epoch %d", self.node_id, self.broker_epoch)

    async def _heartbeat(self) -> None:
        request = make_request(
            BROKER_HEARTBEAT,
            1,
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.current_offset(),
            want_fence=False,
            want_shut_down=self._want_shut_down,
        )
        response = await self.channel.send(request, self._request_timeout)
        self.last_error = ErrorCode(int(response.error_code))
        if self.last_error is ErrorCode.stale_broker_epoch:
            log.warning("broker %d: epoch %d is stale, registering again", self.node_id, self.broker_epoch)
            self.broker_epoch = -1
            self._set_fenced(True)
            return
        if self.last_error is not ErrorCode.none:
            log.warning("broker %d: heartbeat refused: %s", self.node_id, self.last_error.name)
            return
        self.caught_up = bool(response.is_caught_up)
        if self.caught_up and not self._initial_catch_up.is_set():
            log.info("broker %d: caught up with the metadata log (offset %d, registration %d)",
                     self.node_id, request.current_metadata_offset, self.broker_epoch)  # fmt: skip
            self._initial_catch_up.set()
            if self._on_caught_up is not None:
                self._on_caught_up()
        self._set_fenced(bool(response.is_fenced))
        if response.should_shut_down:
            self.should_shut_down = True
            self._released.set()

    def _set_fenced(self, fenced: bool) -> None:
        self.fenced = fenced
        if fenced:
            self._unfenced.clear()
        else:
            self._unfenced.set()
