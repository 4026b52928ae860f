"""One asyncio event loop per Python worker, shared by every Spark task it runs.

Spark calls ``read()``/``write()``/``commit()`` synchronously, and Python
workers are reused across tasks (``spark.python.worker.reuse``), so the
kafkakit asyncio client runs on a loop in a daemon thread that lives as long as
the worker process.  Tasks submit coroutines with :func:`run` and block on the
result.  A fork (Spark's daemon forks workers) gets a fresh loop.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_owner_pid: int | None = None
_cleanups: list[Callable[[], Coroutine[Any, Any, None]]] = []
#: How long the worker's exit waits for kept clients to close.
CLEANUP_TIMEOUT_S = 5.0


def _start_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    threading.Thread(target=serve, name="kafkakit-spark-loop", daemon=True).start()
    ready.wait()
    return loop


def event_loop() -> asyncio.AbstractEventLoop:
    """The worker's background loop, started on first use (and again after a fork)."""
    global _loop, _owner_pid
    with _lock:
        if _loop is None or _owner_pid != os.getpid() or _loop.is_closed():
            _loop = _start_loop()
            _owner_pid = os.getpid()
        return _loop


def on_worker_loop() -> bool:
    """True inside a coroutine running on this process's worker loop (clients may be kept there)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return running is _loop and _owner_pid == os.getpid()


def submit(coro: Coroutine[Any, Any, T]) -> Future[T]:
    """Start ``coro`` on the worker's loop without waiting (the caller does other work meanwhile)."""
    return asyncio.run_coroutine_threadsafe(coro, event_loop())


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the worker's loop and wait for its result (re-raising its error)."""
    future: Future[T] = asyncio.run_coroutine_threadsafe(coro, event_loop())
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


def at_exit(cleanup: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``cleanup()`` on the worker's loop when the process exits (clients kept on the loop
    are closed, not destroyed mid-task with "Task was destroyed but it is pending")."""
    if cleanup not in _cleanups:
        _cleanups.append(cleanup)


def _run_cleanups() -> None:
    loop = _loop
    if loop is None or loop.is_closed() or _owner_pid != os.getpid() or not _cleanups:
        return

    async def all_cleanups() -> None:
        for cleanup in _cleanups:
            try:
                await cleanup()
            except Exception as exc:  # exiting anyway: report, go on with the others
                log.warning("closing kept clients at exit failed: %s", exc)

    try:
        asyncio.run_coroutine_threadsafe(all_cleanups(), loop).result(CLEANUP_TIMEOUT_S)
    except Exception as exc:
        log.warning("closing kept clients at exit did not finish: %s", exc)


atexit.register(_run_cleanups)
