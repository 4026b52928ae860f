"""The exactly-once sink's two-phase protocol (kafkakit.spark.two_phase), without Spark.

Tasks and driver steps are called directly, so each failure case is cheap to
set up: a task attempt that never reports (killed), a driver that stops right
after DECIDED, a batch aborted, a decision whose transactions timed out.  After
each, a read_committed reader must see every row exactly once (or none, for an
abort) and no transaction may be left open (LSO == high watermark).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from kafkakit import Admin, Consumer, NewTopic, TopicPartition
from kafkakit.errors import KafkaConfigError
from kafkakit.spark.two_phase import (
    FAILPOINTS_ENV,
    FailpointError,
    PreparedTransactionLostError,
    PreparedWrite,
    TaskIds,
    TaskTransaction,
    TransactionDeadlineError,
    TwoPhaseConfig,
    abort_batch,
    commit_batch,
    ensure_control_topic,
    read_control,
)

from tests.brokers import RunningBroker, new_topic_name

PARTITIONS = 2


async def _setup(bootstrap: str, timeout_ms: int = 60000) -> tuple[TwoPhaseConfig, str]:
    out = new_topic_name("eos-out")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(out, PARTITIONS, 1)])
    prefix = new_topic_name("eos")
    config = TwoPhaseConfig(
        bootstrap_servers=bootstrap,
        prefix=prefix,
        control_topic=f"{prefix}-control",
        transaction_timeout_ms=timeout_ms,
        request_timeout_ms=10000,
    )
    await ensure_control_topic(config)
    return config, out


async def _task(config: TwoPhaseConfig, out: str, task: TaskIds, values: Sequence[bytes]) -> PreparedWrite:
    txn = TaskTransaction(config, task)
    assert await txn.start()
    await (await txn.producer.send_batch(out, list(values), partition=task.partition % PARTITIONS))
    return await txn.prepare(len(values))


def _rows(batch: int, partition: int, n: int = 5) -> list[bytes]:
    return [b"b%d-p%d-%d" % (batch, partition, i) for i in range(n)]


async def _committed(bootstrap: str, topic: str, wait_s: float = 10.0) -> tuple[list[bytes], bool]:
    """(values a read_committed reader sees, whether no transaction is open on ``topic``).

    Transaction markers are written after EndTxn returns, so this waits up to
    ``wait_s`` for the last stable offset to reach the high watermark.
    """
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    values: list[bytes] = []
    async with (
        Consumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50) as plain,
        Consumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            fetch_max_wait_ms=50,
            auto_offset_reset="earliest",
        ) as c,
    ):
        deadline = time.monotonic() + wait_s
        while True:
            hw = await plain.end_offsets(tps)
            lso = await c.end_offsets(tps)
            if lso == hw or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        while [tp for tp in tps if await c.position(tp) < lso[tp]]:
            for records in (await c.getmany(timeout_ms=200)).values():
                values.extend(r.value for r in records)
    return sorted(values), lso == hw


async def test_commit_makes_every_task_visible_once_and_is_idempotent(broker: RunningBroker) -> None:
    config, out = await _setup(broker.bootstrap_servers)
    writes = [await _task(config, out, TaskIds("q", 0, p, 0), _rows(0, p)) for p in range(PARTITIONS)]
    assert all(w.transaction_version is not None for w in writes)
    values, closed = await _committed(broker.bootstrap_servers, out, wait_s=0)
    assert values == [] and not closed  # prepared, not committed
    await commit_batch(config, "q", 0, writes)
    await commit_batch(config, "q", 0, writes)  # Spark may commit a batch twice
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert values == sorted(_rows(0, 0) + _rows(0, 1)) and closed
    view = await read_control(config)
    assert view.state("q") is not None and view.state("q")["state"] == "done"  # type: ignore[index]
    assert view.live_markers("q") == []  # resolved markers are tombstoned
    # The next batch reuses the transactional ids.
    writes = [await _task(config, out, TaskIds("q", 1, p, 0), _rows(1, p)) for p in range(PARTITIONS)]
    await commit_batch(config, "q", 1, writes)
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert len(values) == 4 * 5 and len(set(values)) == 20 and closed


async def test_orphaned_attempts_are_aborted_at_commit(broker: RunningBroker) -> None:
    """Attempt 0 of partition 0 prepared but its executor died before reporting; attempt 1 won."""
    config, out = await _setup(broker.bootstrap_servers)
    await _task(config, out, TaskIds("q", 0, 0, 0), _rows(0, 0))  # never reported: an orphan
    # An attempt killed after its marker but before prepare: rows sent, transaction open.
    killed = TaskTransaction(config, TaskIds("q", 0, 1, 1))
    assert await killed.start()
    await (await killed.producer.send_batch(out, [b"killed"], partition=1))
    await killed.producer.flush()
    winners = [
        await _task(config, out, TaskIds("q", 0, 0, 2), _rows(0, 0)),
        await _task(config, out, TaskIds("q", 0, 1, 0), _rows(0, 1)),
    ]
    await commit_batch(config, "q", 0, winners)
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert values == sorted(_rows(0, 0) + _rows(0, 1))
    assert closed, "an orphaned transaction is still open"
    await killed.producer.stop()


async def test_driver_dies_after_decided_then_the_rerun_skips_and_rolls_forward(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, out = await _setup(broker.bootstrap_servers)
    writes = [await _task(config, out, TaskIds("q", 0, p, 0), _rows(0, p)) for p in range(PARTITIONS)]
    monkeypatch.setenv(FAILPOINTS_ENV, "commit.after_decided:0:*:*:raise")
    with pytest.raises(FailpointError):
        await commit_batch(config, "q", 0, writes)
    monkeypatch.delenv(FAILPOINTS_ENV)
    values, _ = await _committed(broker.bootstrap_servers, out, wait_s=0)
    assert values == []  # decided, not yet committed
    # The restarted query re-runs batch 0: its tasks see the decision and skip.
    rerun = TaskTransaction(config, TaskIds("q", 0, 0, 0))
    assert not await rerun.start()
    skipped = [rerun.skipped(), TaskTransaction(config, TaskIds("q", 0, 1, 0)).skipped()]
    await commit_batch(config, "q", 0, skipped)
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert values == sorted(_rows(0, 0) + _rows(0, 1)) and closed


async def test_driver_dies_before_decided_then_the_rerun_replaces_the_batch(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, out = await _setup(broker.bootstrap_servers)
    first = [await _task(config, out, TaskIds("q", 0, p, p), _rows(0, p)) for p in range(PARTITIONS)]
    monkeypatch.setenv(FAILPOINTS_ENV, "commit.before_decided:0:*:*:raise")
    with pytest.raises(FailpointError):
        await commit_batch(config, "q", 0, first)
    monkeypatch.delenv(FAILPOINTS_ENV)
    # Re-run with attempt 0 everywhere: partition 1's attempt-1 transaction is an orphan now.
    rerun = [await _task(config, out, TaskIds("q", 0, p, 0), _rows(0, p)) for p in range(PARTITIONS)]
    await commit_batch(config, "q", 0, rerun)
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert values == sorted(_rows(0, 0) + _rows(0, 1)) and closed


async def test_abort_discards_prepared_and_orphaned_transactions(broker: RunningBroker) -> None:
    config, out = await _setup(broker.bootstrap_servers)
    prepared = await _task(config, out, TaskIds("q", 0, 0, 0), _rows(0, 0))
    await _task(config, out, TaskIds("q", 0, 1, 0), _rows(0, 1))  # failed task: no message
    await abort_batch(config, "q", 0, [prepared])
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert values == [] and closed
    # Every task failed: abort gets only None messages, so no query id: markers of the batch are swept.
    await _task(config, out, TaskIds("q", 1, 0, 0), _rows(1, 0))
    await abort_batch(config, None, 1, [])
    values, closed = await _committed(broker.bootstrap_servers, out)
    assert values == [] and closed
    # The re-run commits normally.
    writes = [await _task(config, out, TaskIds("q", 1, p, 0), _rows(1, p)) for p in range(PARTITIONS)]
    await commit_batch(config, "q", 1, writes)
    assert (await _committed(broker.bootstrap_servers, out)) == (sorted(_rows(1, 0) + _rows(1, 1)), True)


async def test_abort_after_decided_rolls_forward(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, out = await _setup(broker.bootstrap_servers)
    writes = [await _task(config, out, TaskIds("q", 0, p, 0), _rows(0, p)) for p in range(PARTITIONS)]
    monkeypatch.setenv(FAILPOINTS_ENV, "commit.after_decided:0:*:*:raise")
    with pytest.raises(FailpointError):
        await commit_batch(config, "q", 0, writes)
    monkeypatch.delenv(FAILPOINTS_ENV)
    await abort_batch(config, "q", 0, writes)
    assert (await _committed(broker.bootstrap_servers, out)) == (sorted(_rows(0, 0) + _rows(0, 1)), True)


async def test_a_decided_transaction_lost_to_its_timeout_fails_loudly(
    broker_min: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator aborts a prepared transaction after transaction.timeout.ms: never a silent loss."""
    config, out = await _setup(broker_min.bootstrap_servers, timeout_ms=1500)
    writes = [await _task(config, out, TaskIds("q", 0, 0, 0), _rows(0, 0))]
    # The driver stalls between DECIDED and EndTxn for longer than the timeout.
    monkeypatch.setenv(FAILPOINTS_ENV, "commit.after_decided:0:*:*:sleep:3.5")
    with pytest.raises(PreparedTransactionLostError, match="LOST"):
        await commit_batch(config, "q", 0, writes)
    monkeypatch.delenv(FAILPOINTS_ENV)
    with pytest.raises(PreparedTransactionLostError):  # and again on every retry / restart
        await commit_batch(config, "q", 0, [])
    assert (await _committed(broker_min.bootstrap_servers, out)) == ([], True)


async def test_no_decision_when_transactions_are_about_to_time_out(broker: RunningBroker) -> None:
    config, out = await _setup(broker.bootstrap_servers)
    write = await _task(config, out, TaskIds("q", 0, 0, 0), _rows(0, 0))
    stale = PreparedWrite(
        write.task,
        write.count,
        write.handle_json,
        write.transaction_version,
        write.started_ms - 59_000,
        60_000,
    )
    with pytest.raises(TransactionDeadlineError, match="kafka.transaction.timeout.ms"):
        await commit_batch(config, "q", 0, [stale])
    assert (await read_control(config)).state("q") is None  # nothing decided
    await abort_batch(config, "q", 0, [write])
    assert (await _committed(broker.bootstrap_servers, out)) == ([], True)


async def test_an_existing_control_topic_must_be_compacted(broker_min: RunningBroker) -> None:
    name = new_topic_name("not-compacted")
    async with Admin(bootstrap_servers=broker_min.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(name, 1, 1, {"cleanup.policy": "delete"})])
    config = TwoPhaseConfig(broker_min.bootstrap_servers, "p", name, 60000)
    with pytest.raises(KafkaConfigError, match="compact") as raised:
        await ensure_control_topic(config)
    assert raised.value.setting == "exactlyOnce.controlTopic"
    await ensure_control_topic(TwoPhaseConfig(broker_min.bootstrap_servers, "p", name + "-new", 60000))
    async with Admin(bootstrap_servers=broker_min.bootstrap_servers) as admin:
        configs = await admin.describe_configs(name + "-new")
    assert configs["cleanup.policy"] == "compact"


# -- on a Spark worker's loop: transactional producers kept between tasks ---------------------


def _on_worker_loop(coro: object) -> object:
    from kafkakit.spark import runtime

    return runtime.run(coro, timeout=120)  # type: ignore[arg-type]


def _kept(config: TwoPhaseConfig, task: TaskIds) -> object:
    from kafkakit.spark import two_phase

    kept = two_phase._kept_producers.get(
        two_phase._kept_key(config, config.transactional_id(task.partition, task.attempt))
    )
    return None if kept is None else kept[0]  # (producer, handle of its prepared transaction)


def test_next_batch_reuses_the_kept_producer_and_commits_exactly_once(broker: RunningBroker) -> None:
    config, out = asyncio.run(_setup(broker.bootstrap_servers))
    first = TaskIds("q", 0, 0, 0)
    writes = [_on_worker_loop(_task(config, out, first, _rows(0, 0)))]
    kept = _kept(config, first)
    if writes[0].transaction_version is None or writes[0].transaction_version < 2:  # type: ignore[attr-defined]
        assert kept is None  # transaction version 1: never kept, every task starts a new producer
    else:
        assert kept is not None
    _on_worker_loop(commit_batch(config, "q", 0, writes))  # type: ignore[arg-type]
    second = TaskIds("q", 1, 0, 0)
    writes = [_on_worker_loop(_task(config, out, second, _rows(1, 0)))]
    if kept is not None:
        assert _kept(config, second) is kept  # the same producer ran batch 1
    _on_worker_loop(commit_batch(config, "q", 1, writes))  # type: ignore[arg-type]
    values, closed = asyncio.run(_committed(broker.bootstrap_servers, out))
    assert values == sorted(_rows(0, 0) + _rows(1, 0)) and closed


def test_a_kept_producer_aborts_its_undecided_transaction_before_the_next(broker: RunningBroker) -> None:
    """Batch 0 prepared but never decided (the driver died); the rerun's task reuses the id."""
    config, out = asyncio.run(_setup(broker.bootstrap_servers))
    _on_worker_loop(_task(config, out, TaskIds("q", 0, 0, 0), _rows(0, 0)))  # prepared, never committed
    rerun = [_on_worker_loop(_task(config, out, TaskIds("q", 0, 0, 0), _rows(9, 0)))]
    _on_worker_loop(commit_batch(config, "q", 0, rerun))  # type: ignore[arg-type]
    values, closed = asyncio.run(_committed(broker.bootstrap_servers, out))
    assert values == sorted(_rows(9, 0)) and closed  # the first attempt's rows never show


def test_a_kept_producer_is_not_reused_after_another_worker_ran_its_id(broker: RunningBroker) -> None:
    """Batch 0 on this worker, batch 1 of the same partition on another, batch 2 here again."""
    config, out = asyncio.run(_setup(broker.bootstrap_servers))
    task = TaskIds("q", 0, 0, 0)
    writes = [_on_worker_loop(_task(config, out, task, _rows(0, 0)))]
    _on_worker_loop(commit_batch(config, "q", 0, writes))  # type: ignore[arg-type]
    kept = _kept(config, task)
    elsewhere = [asyncio.run(_task(config, out, TaskIds("q", 1, 0, 0), _rows(1, 0)))]  # a fresh producer
    asyncio.run(commit_batch(config, "q", 1, elsewhere))
    writes = [_on_worker_loop(_task(config, out, TaskIds("q", 2, 0, 0), _rows(2, 0)))]
    now_kept = _kept(config, task)
    assert kept is None or now_kept is not kept  # the stale one (its epoch fenced) was stopped, not reused
    _on_worker_loop(commit_batch(config, "q", 2, writes))  # type: ignore[arg-type]
    values, closed = asyncio.run(_committed(broker.bootstrap_servers, out))
    assert values == sorted(_rows(0, 0) + _rows(1, 0) + _rows(2, 0)) and closed


def test_a_kept_producer_fenced_by_an_undecided_attempt_elsewhere_is_replaced(broker: RunningBroker) -> None:
    """Batch 0 committed here; batch 1 of the partition prepared on another worker, never decided
    (the query was stopped), then aborted by the driver; the restarted query runs batch 1 here.

    The scope's DONE state still names this worker's transaction, but the other worker's
    InitProducerId moved the id's epoch on: the kept producer is fenced at its first request,
    and the task must carry on with a fresh producer instead of failing (the CI failure of
    examples/spark_exactly_once.py, where Spark's Python workers outlive a stopped query).
    """
    config, out = asyncio.run(_setup(broker.bootstrap_servers))
    task = TaskIds("q", 0, 0, 0)
    writes = [_on_worker_loop(_task(config, out, task, _rows(0, 0)))]
    _on_worker_loop(commit_batch(config, "q", 0, writes))  # type: ignore[arg-type]
    kept = _kept(config, task)
    stopped = [asyncio.run(_task(config, out, TaskIds("q", 1, 0, 0), _rows(1, 0)))]  # another worker
    asyncio.run(abort_batch(config, "q", 1, stopped))
    rerun = [_on_worker_loop(_task(config, out, TaskIds("q", 1, 0, 0), _rows(7, 0)))]
    now_kept = _kept(config, task)
    assert kept is None or now_kept is not kept  # the fenced one was stopped, a fresh one ran
    _on_worker_loop(commit_batch(config, "q", 1, rerun))  # type: ignore[arg-type]
    values, closed = asyncio.run(_committed(broker.bootstrap_servers, out))
    assert values == sorted(_rows(0, 0) + _rows(7, 0)) and closed
