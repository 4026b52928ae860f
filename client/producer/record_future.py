"""The future of one ``send()``: an asyncio-compatible future of its record's metadata.

A batch has one ``asyncio.Future``, resolved with ``(base_offset,
log_append_time, log_start_offset)``; a :class:`RecordFuture` holds its batch
and the record's offset delta, and builds the :class:`~kafkakit.structs.RecordMetadata`
only when someone asks.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from kafkakit.structs import RecordMetadata

if TYPE_CHECKING:
    from kafkakit.producer.accumulator import ProducerBatch

__all__ = ["FUTURES_REUSABLE", "MAX_TIMESTAMP_MS", "SENT_IN_PARTS", "STAMPS_PER_MS", "CancelledState", "RecordFuture"]

#: Record timestamps are kept in nanoseconds (``time.time_ns()`` as read) in the batches'
#: record lists and in RecordFuture, and floored to milliseconds when a batch is encoded
#: (vectorised) or a RecordMetadata is built: the per-record path skips a big-int division
#: (the ``await send()`` loop 1.69 -> 1.59 us a record on the 2026-11-26 VM).
STAMPS_PER_MS = 1_000_000
#: The latest timestamp a record may have: its nanoseconds fit the batches' int64 stamps (the
#: year 2262; Kafka's own limit, int64 milliseconds, is far beyond).
MAX_TIMESTAMP_MS = (2**63 - 1) // STAMPS_PER_MS
#: The base offset of a batch sent in parts: its records' offsets are the parts' (ProducerBatch.split).
SENT_IN_PARTS = -2


class CancelledState:
    """The state of a cancelled RecordFuture: the message to raise CancelledError with."""

    __slots__ = ("message",)

    def __init__(self, message: str | None) -> None:
        self.message = message


Callback = tuple[Callable[["RecordFuture"], object], contextvars.Context | None]


#: Whether ``send()`` may reuse a RecordFuture that nothing references any more (see
#: ``Producer.send``). ``sys.getrefcount`` proves that only on CPython up to 3.13 with the
#: GIL: 3.14 may skip counting references on the interpreter's stack, and a free-threaded
#: build splits its counts, so the number no longer shows that nobody else holds the object.
FUTURES_REUSABLE = (
    sys.implementation.name == "cpython"
    and sys.version_info < (3, 14)
    and getattr(sys, "_is_gil_enabled", lambda: True)()
)


class RecordFuture:
    """The result of one ``send()``: an asyncio-compatible future of its RecordMetadata.

    ``asyncio.isfuture()`` is true for it, so ``asyncio.gather``, ``wait``,
    ``as_completed``, ``shield`` and ``await`` use it directly instead of wrapping
    it in a Task, and it has the Future API (``done``, ``result``, ``exception``,
    ``cancel``, ``add_done_callback``, ``remove_done_callback``, ``get_loop``).

    It is cheaper than an ``asyncio.Future`` per record: it holds the batch and
    the record's offset delta and builds the metadata on demand.  The record
    futures of a batch that have callbacks share one callback on the batch's
    future, which fans out to them.

    Cancelling it (directly, or by cancelling a Task or ``gather`` awaiting it)
    cancels only this future: the record stays in its batch and may still be
    delivered, as with the futures of aiokafka's ``send()``.
    """

    # _state: None (nothing waits), one callback, a list of (callback, context), or CancelledState.
    # _asyncio_future_blocking is asyncio's duck-typing flag (asyncio.isfuture, Task.__step):
    # a slot, so that reading it is as cheap as on asyncio's own futures.
    __slots__ = ("_batch", "_delta", "_timestamp", "_state", "_asyncio_future_blocking")

    # No __init__: ``RecordFuture()`` with the five stores below costs less than a call to a
    # Python __init__ or to object.__new__ (send() builds one per record). Build with of().
    _batch: ProducerBatch
    _delta: int
    _timestamp: int
    _state: Callable[[RecordFuture], object] | list[Callback] | CancelledState | None
    _asyncio_future_blocking: bool

    @classmethod
    def of(cls, batch: ProducerBatch, delta: int, timestamp_ms: int) -> RecordFuture:
        """The future of record ``delta`` of ``batch`` (Producer.send inlines this: keep in step)."""
        future = cls()
        future._batch = batch
        future._delta = delta
        future._timestamp = timestamp_ms * STAMPS_PER_MS
        future._state = None
        future._asyncio_future_blocking = False
        return future

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            self._asyncio_future_blocking = True
            yield self  # the Task waits on this future: cancelling the Task cancels only it
            if not self.done():
                raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._batch.future.get_loop()

    def done(self) -> bool:
        return self._batch.future.done() or type(self._state) is CancelledState

    def cancelled(self) -> bool:
        return type(self._state) is CancelledState

    def cancel(self, msg: str | None = None) -> bool:
        """Cancel this future (not the record's delivery); False when it is already done."""
        if self.done():
            return False
        callbacks = self._take_callbacks()
        self._state = CancelledState(msg)
        loop = self.get_loop()
        for callback, context in callbacks:
            loop.call_soon(callback, self, context=context)
        return True

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        """What asyncio.gather raises for a cancelled child (part of asyncio's future protocol)."""
        state = self._state
        message = state.message if isinstance(state, CancelledState) else None
        return asyncio.CancelledError(message) if message else asyncio.CancelledError()

    def result(self) -> RecordMetadata:
        """The metadata; raises the delivery error, CancelledError, or InvalidStateError while pending."""
        if type(self._state) is CancelledState:
            raise self._make_cancelled_error()
        batch = self._batch
        base_offset, log_append_time, log_start_offset = batch.future.result()
        tp = batch.tp
        if base_offset >= 0:
            offset = base_offset + self._delta
        elif base_offset == SENT_IN_PARTS and batch.split is not None:
            offset = batch.split.offset_of(self._delta)
        else:
            offset = -1
        if log_append_time >= 0:
            return RecordMetadata(tp.topic, tp.partition, offset, log_append_time, 1, log_start_offset)
        return RecordMetadata(tp.topic, tp.partition, offset, self._timestamp // STAMPS_PER_MS, 0, log_start_offset)

    def exception(self) -> BaseException | None:
        if type(self._state) is CancelledState:
            raise self._make_cancelled_error()
        return self._batch.future.exception()

    def add_done_callback(
        self, callback: Callable[[RecordFuture], object], *, context: contextvars.Context | None = None
    ) -> None:
        """Call ``callback(self)`` once done (soon, if it already is), as ``asyncio.Future`` does."""
        state = self._state
        batch = self._batch
        if batch.future.done() or type(state) is CancelledState:
            self.get_loop().call_soon(callback, self, context=context)
        elif state is None:
            # One callback without a context (asyncio.gather's) is kept as is: no allocation.
            self._state = callback if context is None else [(callback, context)]
            waiters = batch.waiters  # batch.add_waiter, inlined: this runs once per gathered record
            if waiters is None:
                batch.add_waiter(self)
            else:
                waiters.append(self)
        elif type(state) is list:
            state.append((callback, context))
        else:
            self._state = [(state, None), (callback, context)]  # type: ignore[list-item]

    def remove_done_callback(self, callback: Callable[[RecordFuture], object]) -> int:
        if type(self._state) is CancelledState:
            return 0  # its callbacks were already scheduled
        callbacks = self._take_callbacks()
        kept = [(fn, ctx) for fn, ctx in callbacks if fn != callback]
        self._state = kept or None
        return len(callbacks) - len(kept)

    def _take_callbacks(self) -> list[Callback]:
        """The pending callbacks, removed from this future (cancelled or not, the state stays)."""
        state = self._state
        if state is None or type(state) is CancelledState:
            return []
        if type(state) is list:
            self._state = None
            return state
        self._state = None
        return [(state, None)]  # type: ignore[list-item]

    def _batch_done(self) -> None:
        """The batch completed: run this future's callbacks now (we are already in a loop callback)."""
        state = self._state
        if state is None or type(state) is CancelledState:
            return  # nothing left to call, or cancelled (its callbacks already ran)
        self._state = None
        if type(state) is not list:
            try:
                state(self)  # type: ignore[operator]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._report(state, exc)
            return
        for callback, context in state:  # type: ignore[union-attr]
            try:
                if context is None:
                    callback(self)
                else:
                    context.run(callback, self)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._report(callback, exc)

    def _report(self, callback: object, exc: BaseException) -> None:
        """An exception in a callback is reported like one in a loop callback, not raised."""
        self.get_loop().call_exception_handler(
            {"message": f"Exception in callback {callback!r}", "exception": exc, "future": self}
        )

    def __repr__(self) -> str:
        if not self.done():
            state = "pending"
        elif self.cancelled():
            state = "cancelled"
        else:
            state = "failed" if self._batch.future.exception() else "done"
        return f"<RecordFuture {self._batch.tp.topic}-{self._batch.tp.partition} delta={self._delta} {state}>"
