"""The ``kafka_topic`` factory: fresh topics through kafkakit's Admin, deleted after the test."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

__all__ = ["TopicFactory", "topic_prefix"]

_T = TypeVar("_T")


def topic_prefix(test_name: str) -> str:
    """A topic-name prefix from a test's name (topic names allow ``[a-zA-Z0-9._-]``)."""
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", test_name).strip("-")[:40] or "t"


def _run_in_thread(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion on a fresh loop in a fresh thread.

    A thread of its own, because the caller may be an async test whose loop is
    running (``asyncio.run`` there would raise).
    """
    result: list[_T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(make()))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="kafka_topic")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _config_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class TopicFactory:
    """``factory(partitions=1, config=None, name=None) -> str``: create a topic now, delete it later.

    Each call creates a new topic (named ``<test name>-<random hex>`` unless
    ``name`` is given) with kafkakit's :class:`~kafkakit.Admin` and returns once
    every partition has a leader. :meth:`delete_created` removes them all.
    """

    def __init__(self, bootstrap_servers: str, prefix: str = "t", *, replication_factor: int = 1) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.prefix = prefix
        #: the replication factor of a topic whose call does not give one
        self.replication_factor = replication_factor
        #: names of the topics this factory created, in order
        self.created: list[str] = []

    def __call__(
        self,
        partitions: int = 1,
        config: Mapping[str, object] | None = None,
        name: str | None = None,
        *,
        replication_factor: int | None = None,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic and return its name.

        ``config`` holds topic settings such as ``{"cleanup.policy": "compact"}``
        (values may be str, int or bool); ``replication_factor`` matters only on a
        multi-node cluster (default: the factory's, 1 for ``kafka_topic``).
        """
        from kafkakit import Admin, NewTopic  # imported late: the plugin stays cheap to load

        topic_name = name or f"{self.prefix}-{uuid.uuid4().hex[:12]}"
        new_topic = NewTopic(
            topic_name,
            num_partitions=partitions,
            replication_factor=self.replication_factor if replication_factor is None else replication_factor,
            configs={key: _config_value(value) for key, value in (config or {}).items()},
        )

        async def create() -> None:
            async with Admin(
                bootstrap_servers=self.bootstrap_servers, request_timeout_ms=int(timeout * 1000)
            ) as admin:
                await admin.create_topics([new_topic])

        async def create_in_time() -> None:
            try:
                await asyncio.wait_for(create(), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"kafka_topic: creating {topic_name!r} on {self.bootstrap_servers} took over {timeout:.0f}s"
                ) from None

        _run_in_thread(create_in_time)
        self.created.append(topic_name)
        return topic_name

    def delete_created(self, timeout: float = 10.0) -> None:
        """Delete every topic this factory created, best effort (a dead broker is not an error here)."""
        from kafkakit import Admin, KafkaError

        names, self.created = self.created, []
        if not names:
            return

        async def delete() -> None:
            async with Admin(
                bootstrap_servers=self.bootstrap_servers, request_timeout_ms=int(timeout * 1000)
            ) as admin:
                await admin.delete_topics(names)

        async def delete_in_time() -> None:
            await asyncio.wait_for(delete(), timeout)

        with contextlib.suppress(KafkaError, OSError, TimeoutError):
            _run_in_thread(delete_in_time)
