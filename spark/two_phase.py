"""Exactly-once Spark writes: Kafka transactions committed in two phases through a control topic.

Spark's commit protocol has executors write and the driver decide; Kafka
transactions map onto it because a transaction prepared by one process can be
finished by another (:func:`kafkakit.producer.complete_transaction` sends
EndTxn with the prepared transaction's producer id and epoch).  The steps:

Executor, per task (:class:`TaskTransaction`):
  1. Read the control topic; if the driver already DECIDED (or finished) this
     batch, skip: the data is in transactions that will be committed.  The
     check comes before ``init_transactions`` because that call would abort them.
  2. ``init_transactions`` for ``{prefix}.{task partition}.{attempt}`` (aborts what
     an earlier task with that id left open), begin.
  3. A marker record (scope, batch, transactional id) to the control topic,
     delivered before any data, so the driver can find a task killed mid-write.
  4. The rows; then ``prepare_transaction`` (flush, no EndTxn) gives a handle.

Driver, per batch (:func:`commit_batch`):
  1. DONE recorded for the batch: return (Spark may call commit again).
  2. Otherwise write DECIDED(batch, handles) with acks=all.  This is the commit
     point: from here on the batch is committed, whatever crashes.
  3. EndTxn(commit) for each handle (a retry of a finished commit succeeds).
     A transaction that is gone (the coordinator aborted it after
     ``transaction.timeout.ms``, or its id was re-initialised) raises
     :class:`PreparedTransactionLostError`: its rows are lost, and we never hide it.
  4. Abort orphans: every live marker of the scope whose transactional id is not
     in the decision (failed or killed attempts, speculative losers), by
     re-initialising that id (InitProducerId aborts its open transaction).
  5. Tombstone the resolved markers, then write DONE(batch).

:func:`abort_batch` aborts the messages' transactions and the orphans, unless
the batch was DECIDED, in which case it rolls forward.

The control topic is compacted: one ``state/{scope}`` record per query (the
latest decision) and one ``marker/{scope}/{partition}/{attempt}`` record per
transactional id, tombstoned once resolved, so its live size stays bounded.

Test-only failpoints: ``KAFKAKIT_SPARK_TEST_FAILPOINTS`` (see :func:`failpoint`)
makes a step raise, exit or hold, so tests can crash the protocol at each step.
Unset (always, outside tests), every failpoint is a dictionary lookup.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kafkakit import Admin, Consumer, KafkaError, NewTopic, Producer
from kafkakit.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    UnknownProducerIdError,
)
from kafkakit.net.security import SecurityConfig
from kafkakit.producer import TransactionHandle, TransactionState, complete_transaction
from kafkakit.spark import runtime
from kafkakit.spark.control_channel import ChannelCache, ControlChannel
from kafkakit.spark.security import SecurityOptions

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Errors EndTxn answers when the transaction it names no longer exists as prepared.
_GONE = (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError, UnknownProducerIdError)
#: Control topic settings: compacted, kept forever (a decision must survive any restart delay).
CONTROL_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1"}
DECIDED = "decided"
DONE = "done"


class PreparedTransactionLostError(KafkaError):
    """A transaction the driver DECIDED to commit no longer exists: its rows are lost.

    Happens when the coordinator aborted it after ``transaction.timeout.ms``
    (the driver was down or slow for longer than that) or something
    re-initialised its transactional id.  Never retried away silently.
    """


class TransactionDeadlineError(KafkaError):
    """The batch's transactions are about to time out before the driver could decide.

    Nothing was committed; restarting the query re-runs the batch.  Raise
    ``kafka.transaction.timeout.ms`` if batches take this long.
    """


@dataclass(frozen=True, slots=True)
class TwoPhaseConfig:
    """What both sides of the protocol need; plain data, pickled to executors."""

    bootstrap_servers: str
    prefix: str
    control_topic: str
    transaction_timeout_ms: int
    producer_settings: dict[str, Any] = field(default_factory=dict)
    client_id: str = "kafkakit-spark"
    request_timeout_ms: int = 30000
    #: TLS/SASL options as strings (spark/security.py); clients build their SSLContext from them.
    security: SecurityOptions = field(default_factory=SecurityOptions)

    def client_security(self) -> dict[str, Any]:
        """Security keyword arguments for a Producer, Consumer or Admin of this sink."""
        return self.security.client_kwargs()

    def transactional_id(self, partition: int, attempt: int) -> str:
        return f"{self.prefix}.{partition}.{attempt}"


@dataclass(frozen=True, slots=True)
class TaskIds:
    """Which write this is: ``scope`` is the streaming query id (or a batch job's id)."""

    scope: str
    batch: int
    partition: int
    attempt: int


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """An executor's result: the prepared transaction (None when the batch was already decided)."""

    task: TaskIds
    count: int
    handle_json: str | None
    transaction_version: int | None
    started_ms: int
    transaction_timeout_ms: int

    @property
    def skipped(self) -> bool:
        return self.handle_json is None

    def handle(self) -> TransactionHandle:
        if self.handle_json is None:
            raise ValueError("a skipped write has no transaction")
        return TransactionHandle.from_json(self.handle_json)


@dataclass(frozen=True, slots=True)
class Marker:
    key: str
    scope: str
    batch: int
    transactional_id: str


@dataclass(slots=True)
class ControlView:
    """The control topic compacted in memory: latest state per scope, live markers."""

    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    markers: dict[str, Marker] = field(default_factory=dict)

    def state(self, scope: str) -> dict[str, Any] | None:
        return self.states.get(scope)

    def live_markers(self, scope: str | None = None, batch: int | None = None) -> list[Marker]:
        return [
            m
            for m in self.markers.values()
            if (scope is None or m.scope == scope) and (batch is None or m.batch == batch)
        ]

    def apply(self, key: str, value: bytes | None) -> None:
        if key.startswith("state/"):
            if value is None:
                self.states.pop(key[len("state/") :], None)
            else:
                self.states[key[len("state/") :]] = json.loads(value)
        elif key.startswith("marker/"):
            if value is None:
                self.markers.pop(key, None)
            else:
                data = json.loads(value)
                self.markers[key] = Marker(key, data["scope"], int(data["batch"]), data["transactional_id"])


def state_key(scope: str) -> bytes:
    return f"state/{scope}".encode()


def marker_key(task: TaskIds) -> str:
    return f"marker/{task.scope}/{task.partition}/{task.attempt}"


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- failpoints (test-only) ------------------------------------------------------------------

FAILPOINTS_ENV = "KAFKAKIT_SPARK_TEST_FAILPOINTS"


class FailpointError(RuntimeError):
    """Raised by a test failpoint with the ``raise`` action."""


def _matches(pattern: str, value: int | None) -> bool:
    return pattern == "*" or (value is not None and pattern == str(value))


def failpoint(
    step: str, batch: int | None = None, partition: int | None = None, attempt: int | None = None
) -> None:
    """TEST ONLY: act at ``step`` when ``KAFKAKIT_SPARK_TEST_FAILPOINTS`` asks for it.

    The variable holds ``;``-separated entries ``step:batch:partition:attempt:action[:arg]``
    (``*`` matches anything).  Actions: ``raise`` (FailpointError), ``exit``
    (``os._exit``: the process dies as if killed), ``sleep:SECONDS``, and
    ``hold:PATH`` (create PATH, then wait until this process is killed; gives
    up after 10 minutes or when the parent dies).  Steps: ``write.before_init``,
    ``write.after_rows``, ``write.after_prepare``, ``commit.before_decided``,
    ``commit.after_decided``, ``commit.after_endtxn``.
    """
    spec = os.environ.get(FAILPOINTS_ENV)
    if not spec:
        return
    for entry in spec.split(";"):
        parts = entry.strip().split(":", 5)
        if len(parts) < 5 or parts[0] != step:
            continue
        if not (_matches(parts[1], batch) and _matches(parts[2], partition) and _matches(parts[3], attempt)):
            continue
        _act(step, parts[4], parts[5] if len(parts) > 5 else "")


def _act(step: str, action: str, arg: str) -> None:
    # print, not only log: Spark's Python workers have no logging set up.
    print(f"test failpoint {step}: {action} {arg}", file=sys.stderr, flush=True)
    log.warning("test failpoint %s: %s %s", step, action, arg)
    if action == "raise":
        raise FailpointError(f"test failpoint at {step}")
    if action == "exit":
        os._exit(86)
    if action == "sleep":
        time.sleep(float(arg))
        return
    if action == "hold":
        Path(arg).write_text(f"{step} {os.getpid()}\n")
        parent = os.getppid()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and os.getppid() == parent:
            time.sleep(0.1)
        os._exit(87)
    raise ValueError(f"{FAILPOINTS_ENV}: unknown action {action!r}")


# -- the control topic ---------------------------------------------------------------------


async def ensure_control_topic(config: TwoPhaseConfig) -> None:
    """Create the compacted control topic if missing; refuse one that is not compacted."""
    admin = Admin(
        bootstrap_servers=config.bootstrap_servers, client_id=config.client_id, **config.client_security()
    )
    await admin.start()
    try:
        try:
            await admin.create_topics([NewTopic(config.control_topic, 1, -1, dict(CONTROL_TOPIC_CONFIGS))])
            return
        except TopicAlreadyExistsError:
            pass
        configs = await admin.describe_configs(config.control_topic)
        if "compact" not in configs.get("cleanup.policy", ""):
            from kafkakit.errors import KafkaConfigError

            raise KafkaConfigError(
                "exactlyOnce.controlTopic",
                f"topic {config.control_topic!r} exists with cleanup.policy="
                f"{configs.get('cleanup.policy')!r}; it must be compacted (decisions must never expire)",
            )
    finally:
        await admin.close()


def _control_consumer(config: TwoPhaseConfig) -> Consumer:
    return Consumer(
        bootstrap_servers=config.bootstrap_servers,
        client_id=config.client_id,
        isolation_level="read_uncommitted",  # markers of open transactions count
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=0,  # reads stop at an end just looked up: nothing to wait for
        allow_auto_create_topics=False,
        **config.client_security(),
    )


def _control_producer(config: TwoPhaseConfig) -> Producer:
    return Producer(
        bootstrap_servers=config.bootstrap_servers,
        client_id=config.client_id,
        acks="all",
        request_timeout_ms=config.request_timeout_ms,
        **config.client_security(),
    )


def _new_channel(config: TwoPhaseConfig) -> ControlChannel:
    return ControlChannel(
        config.control_topic, lambda: _control_consumer(config), lambda: _control_producer(config)
    )


#: Channels kept on the worker's loop (kafkakit.spark.runtime): one per process, control topic
#: and client settings, living as long as the Python worker (tasks and batches reuse them).
_channels = ChannelCache()


def _channel_key(config: TwoPhaseConfig) -> tuple[Any, ...]:
    security = tuple(sorted(config.security.settings.items()))
    return (os.getpid(), config.bootstrap_servers, config.control_topic, config.client_id, security)


async def _with_channel(config: TwoPhaseConfig, use: Callable[[ControlChannel], Awaitable[T]]) -> T:
    """Run ``use`` with the worker's kept channel, or with a one-off channel off the worker loop."""
    if not runtime.on_worker_loop():
        channel = _new_channel(config)
        try:
            return await use(channel)
        finally:
            await channel.close()
    key = _channel_key(config)
    channel = _channels.get(key, lambda: _new_channel(config))
    try:
        return await use(channel)
    except BaseException:
        await _channels.discard(key)  # the next call starts with fresh clients
        raise


async def read_control(config: TwoPhaseConfig) -> ControlView:
    """The control topic's live records as a view (read_uncommitted: markers of open transactions count)."""
    latest = await _with_channel(config, lambda channel: channel.snapshot())
    view = ControlView()
    for key, value in latest.items():
        view.apply(key, value)
    return view


async def _write_control(config: TwoPhaseConfig, records: Sequence[tuple[bytes, bytes | None]]) -> None:
    """Write records to the control topic with acks=all (idempotent), waiting for each."""
    await _with_channel(config, lambda channel: channel.write(records))


# -- executor side ------------------------------------------------------------------------


def decided_batch(view: ControlView, scope: str) -> int | None:
    """The latest batch the driver decided (or finished) for ``scope``."""
    state = view.state(scope)
    return None if state is None else int(state["batch"])


#: Transactional producers a worker keeps after their task prepared, by transactional id, so the
#: next task with that id (the same Spark partition in the next micro-batch, when it lands on
#: this worker) skips connecting, metadata, FindCoordinator and InitProducerId. Only with
#: transaction version 2 (KIP-890), where the bumped-epoch InitProducerId of
#: forget_prepared_transaction ends whatever the id left, as init_transactions does.
_kept_producers: dict[tuple[Any, ...], tuple[Producer, TransactionHandle]] = {}
#: Beyond this many, the least recently kept producer is stopped.
MAX_KEPT_PRODUCERS = 16


def _kept_key(config: TwoPhaseConfig, transactional_id: str) -> tuple[Any, ...]:
    settings = tuple(sorted((k, repr(v)) for k, v in config.producer_settings.items()))
    security = tuple(sorted(config.security.settings.items()))
    return (
        os.getpid(),
        config.bootstrap_servers,
        transactional_id,
        config.client_id,
        config.transaction_timeout_ms,
        settings,
        security,
    )


async def _keep_producer(key: tuple[Any, ...], producer: Producer, handle: TransactionHandle) -> None:
    previous = _kept_producers.pop(key, None)
    _kept_producers[key] = (producer, handle)
    evicted = [previous[0]] if previous is not None and previous[0] is not producer else []
    while len(_kept_producers) > MAX_KEPT_PRODUCERS:
        evicted.append(_kept_producers.pop(next(iter(_kept_producers)))[0])
    for old in evicted:
        await old.stop()


def _last_committed_by(state: Mapping[str, Any] | None, handle: TransactionHandle) -> bool:
    """Whether the scope's finished batch committed exactly ``handle``'s transaction.

    Then no producer used its transactional id since (the next user is the next batch's
    task), and the producer that prepared it holds the id's current epoch. Anything
    else (another worker ran the id since, the batch was never decided) means a
    kept producer would be fenced: a fresh one is started instead.
    """
    if state is None or state.get("state") != DONE:
        return False
    for text in state.get("handles", ()):
        other = TransactionHandle.from_json(text)
        if (other.transactional_id, other.producer_id, other.producer_epoch) == (
            handle.transactional_id,
            handle.producer_id,
            handle.producer_epoch,
        ):
            return True
    return False


async def close_kept_clients() -> None:
    """Stop this worker's kept control channels and transactional producers."""
    while _kept_producers:
        producer, _ = _kept_producers.pop(next(iter(_kept_producers)))
        await producer.stop()
    await _channels.close_all()


runtime.at_exit(close_kept_clients)


class TaskTransaction:
    """One task's side of the protocol, driven step by step from Spark's synchronous ``write()``.

    ``await start()`` (False: the batch was already decided, skip the task), then
    send rows with :attr:`producer`, then ``await prepare()``; on any error
    ``await abort()``.  The steps are separate coroutines so that the task's
    thread reads Spark's input while the event loop delivers the previous rows.
    """

    def __init__(self, config: TwoPhaseConfig, task: TaskIds) -> None:
        self.config = config
        self.task = task
        self.transactional_id = config.transactional_id(task.partition, task.attempt)
        self._producer: Producer | None = None
        self._started_ms = 0

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("start() the task transaction first")
        return self._producer

    def skipped(self) -> PreparedWrite:
        return PreparedWrite(self.task, 0, None, None, _now_ms(), self.config.transaction_timeout_ms)

    async def start(self) -> bool:
        config, task = self.config, self.task
        view = await read_control(config)
        decided = decided_batch(view, task.scope)
        if decided is not None and decided >= task.batch:
            log.info("batch %s of %s already decided: skipping task %s", task.batch, task.scope, task)
            return False
        failpoint("write.before_init", task.batch, task.partition, task.attempt)
        kept = await self._kept_producer(view.state(task.scope))
        if kept is not None:
            try:
                await self._begin(kept)
                return True
            except KafkaError as exc:
                # The DONE state cannot tell that an undecided attempt of a later batch ran this
                # id on another worker (a query stopped mid-batch, then restarted while Spark's
                # Python workers lived on): that InitProducerId fenced the kept producer. A
                # fresh producer's init_transactions ends whatever the id left open.
                log.info(
                    "the kept producer of %s cannot go on (%s): starting a fresh one",
                    self.transactional_id,
                    exc,
                )
                self._producer = None
                await kept.stop()
        producer = Producer(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=config.transaction_timeout_ms,
            **config.producer_settings,
            **config.client_security(),
        )
        await producer.start()
        self._producer = producer
        await producer.init_transactions()  # aborts whatever this id left open
        await self._begin(producer)
        return True

    async def _begin(self, producer: Producer) -> None:
        """Begin the task's transaction and deliver its marker to the control topic."""
        config, task = self.config, self.task
        self._producer = producer
        self._started_ms = _now_ms()
        producer.begin_transaction()
        marker = {
            "scope": task.scope,
            "batch": task.batch,
            "transactional_id": self.transactional_id,
            "at": self._started_ms,
        }
        # Delivered before any row: a task killed from here on leaves a trace for the driver.
        await (
            await producer.send(
                config.control_topic, json.dumps(marker).encode(), key=marker_key(task).encode(), partition=0
            )
        )

    async def _kept_producer(self, state: Mapping[str, Any] | None) -> Producer | None:
        """This id's producer kept by an earlier task of this worker, ready for a new transaction."""
        if not runtime.on_worker_loop():
            return None
        kept = _kept_producers.pop(_kept_key(self.config, self.transactional_id), None)
        if kept is None:
            return None
        producer, handle = kept
        if not _last_committed_by(state, handle):
            await producer.stop()
            return None
        try:
            # The driver committed its prepared transaction (EndTxn bumped the epoch): the
            # InitProducerId that forget_prepared_transaction sends reads the bumped epoch.
            producer.forget_prepared_transaction()
        except KafkaError as exc:
            log.info("not reusing the kept producer of %s: %s", self.transactional_id, exc)
            await producer.stop()
            return None
        return producer

    async def prepare(self, count: int) -> PreparedWrite:
        producer = self.producer
        handle = await producer.prepare_transaction()
        self._producer = None
        if runtime.on_worker_loop() and (handle.transaction_version or 0) >= 2:  # KIP-890
            await _keep_producer(_kept_key(self.config, self.transactional_id), producer, handle)
        else:
            await producer.stop()
        failpoint("write.after_prepare", self.task.batch, self.task.partition, self.task.attempt)
        return PreparedWrite(
            self.task,
            count,
            handle.to_json(),
            handle.transaction_version,
            self._started_ms,
            self.config.transaction_timeout_ms,
        )

    async def abort(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            await _abort_quietly(producer)
        finally:
            await producer.stop()


async def _abort_quietly(producer: Producer) -> None:
    try:
        if producer.transaction_state not in (None, TransactionState.READY, TransactionState.FATAL):
            await producer.abort_transaction()
    except Exception as exc:  # the task fails anyway; the driver's orphan sweep is the backstop
        log.warning("aborting a failed task's transaction failed: %s", exc)


# -- driver side ------------------------------------------------------------------------


def _handles_of(state: Mapping[str, Any]) -> list[TransactionHandle]:
    return [TransactionHandle.from_json(h) for h in state["handles"]]


async def commit_batch(
    config: TwoPhaseConfig, scope: str, batch: int, writes: Sequence[PreparedWrite]
) -> None:
    """The driver's commit: decide, commit every prepared transaction, clean up (idempotent)."""
    view = await read_control(config)
    state = view.state(scope)
    if state is not None and state["state"] == DECIDED and int(state["batch"]) < batch:
        log.warning("finishing %s's batch %s, decided but not finished", scope, state["batch"])
        await _finish(config, view, scope, state)
        state = view.state(scope)
    if state is not None and int(state["batch"]) >= batch:
        if state["state"] == DONE or int(state["batch"]) > batch:
            log.info("batch %s of %s already committed", batch, scope)
            return
        await _finish(config, view, scope, state)  # DECIDED before a crash: roll forward
        return
    if any(w.skipped for w in writes):
        raise KafkaError(
            f"batch {batch} of {scope}: tasks skipped it as decided, but the control topic "
            f"{config.control_topic!r} has no decision for it (was the topic deleted?)"
        )
    _check_deadlines(batch, writes)
    failpoint("commit.before_decided", batch)
    decision = {
        "state": DECIDED,
        "batch": batch,
        "handles": [w.handle_json for w in writes],
        "at": _now_ms(),
    }
    await _write_control(config, [(state_key(scope), json.dumps(decision).encode())])
    view.states[scope] = decision
    failpoint("commit.after_decided", batch)
    await _finish(config, view, scope, decision)


def _check_deadlines(batch: int, writes: Iterable[PreparedWrite]) -> None:
    """Refuse to decide when a transaction may time out before EndTxn reaches it."""
    now = _now_ms()
    for w in writes:
        margin = min(w.transaction_timeout_ms // 10, 30000)
        if now > w.started_ms + w.transaction_timeout_ms - margin:
            raise TransactionDeadlineError(
                f"batch {batch}: the transaction of task {w.task.partition} (attempt {w.task.attempt}) "
                f"started {(now - w.started_ms) / 1000:.1f}s ago and times out after "
                f"{w.transaction_timeout_ms / 1000:.1f}s; nothing was committed, a restart re-runs the "
                "batch. Raise kafka.transaction.timeout.ms."
            )


async def _finish(config: TwoPhaseConfig, view: ControlView, scope: str, decision: Mapping[str, Any]) -> None:
    """Roll a decision forward: EndTxn(commit) each, abort orphans, tombstone markers, write DONE."""
    batch = int(decision["batch"])
    handles = _handles_of(decision)
    results = await asyncio.gather(*(_commit_one(config, h) for h in handles), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    failpoint("commit.after_endtxn", batch)
    committed = {h.transactional_id for h in handles}
    markers = view.live_markers(scope)
    await _abort_orphans(config, [m for m in markers if m.transactional_id not in committed])
    # The handles stay in DONE: a worker that kept a producer checks its transaction was the one
    # committed last for its id before reusing it (TaskTransaction._kept_producer).
    done = {"state": DONE, "batch": batch, "handles": list(decision["handles"]), "at": _now_ms()}
    await _write_control(
        config,
        [*((m.key.encode(), None) for m in markers), (state_key(scope), json.dumps(done).encode())],
    )
    for m in markers:
        view.markers.pop(m.key, None)
    view.states[scope] = done


async def _commit_one(config: TwoPhaseConfig, handle: TransactionHandle) -> None:
    try:
        await complete_transaction(
            config.bootstrap_servers,
            handle,
            True,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            security=SecurityConfig(**config.client_security()),
        )
    except _GONE as exc:
        raise PreparedTransactionLostError(
            f"the decided transaction of {handle.transactional_id!r} (producer id {handle.producer_id}, "
            f"epoch {handle.producer_epoch}) can no longer be committed: the coordinator aborted it "
            f"(transaction.timeout.ms passed before the driver committed) or its id was reused. Its rows "
            f"are LOST from the output; the query cannot make this batch exactly-once. Cause: {exc}"
        ) from exc


async def _abort_orphans(config: TwoPhaseConfig, orphans: Iterable[Marker]) -> None:
    ids = sorted({m.transactional_id for m in orphans})
    if ids:
        log.info("aborting orphaned transactions %s", ids)
        await asyncio.gather(*(fence(config, i) for i in ids))


async def fence(config: TwoPhaseConfig, transactional_id: str) -> None:
    """Abort whatever ``transactional_id`` has open: InitProducerId does it (and fences zombies)."""
    producer = Producer(
        bootstrap_servers=config.bootstrap_servers,
        client_id=config.client_id,
        transactional_id=transactional_id,
        transaction_timeout_ms=config.transaction_timeout_ms,
        request_timeout_ms=config.request_timeout_ms,
        **config.client_security(),
    )
    await producer.start()
    try:
        await producer.init_transactions()
    finally:
        await producer.stop()


async def abort_batch(
    config: TwoPhaseConfig, scope: str | None, batch: int, writes: Sequence[PreparedWrite]
) -> None:
    """The driver's abort: roll forward if DECIDED, else abort the prepared and orphaned transactions.

    ``scope`` is None when no task returned a message (then markers of ``batch``
    in any scope are swept, except those of a decision).
    """
    view = await read_control(config)
    if scope is not None:
        state = view.state(scope)
        if state is not None and int(state["batch"]) == batch:
            if state["state"] == DECIDED:
                log.warning("abort of decided batch %s of %s: rolling forward", batch, scope)
                await _finish(config, view, scope, state)
            return
    decided_ids = {
        h.transactional_id for s in view.states.values() if s["state"] == DECIDED for h in _handles_of(s)
    }
    prepared = [w for w in writes if not w.skipped]
    for w in prepared:
        await _abort_one(config, w.handle())
    orphans = [
        m
        for m in view.live_markers(scope, batch)
        if m.transactional_id not in decided_ids
        and m.transactional_id not in {w.handle().transactional_id for w in prepared}
    ]
    await _abort_orphans(config, orphans)


async def _abort_one(config: TwoPhaseConfig, handle: TransactionHandle) -> None:
    try:
        await complete_transaction(
            config.bootstrap_servers,
            handle,
            False,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            security=SecurityConfig(**config.client_security()),
        )
    except _GONE:
        pass  # already aborted (its id was re-initialised, or it timed out)
    except KafkaError as exc:
        log.warning("EndTxn(abort) for %s failed (%s): fencing the id instead", handle.transactional_id, exc)
        await fence(config, handle.transactional_id)


__all__ = [
    "CONTROL_TOPIC_CONFIGS",
    "ControlView",
    "FAILPOINTS_ENV",
    "FailpointError",
    "PreparedTransactionLostError",
    "PreparedWrite",
    "TaskIds",
    "TransactionDeadlineError",
    "TwoPhaseConfig",
    "abort_batch",
    "commit_batch",
    "ensure_control_topic",
    "failpoint",
    "fence",
    "TaskTransaction",
    "read_control",
]
