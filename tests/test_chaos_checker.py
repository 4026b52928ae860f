"""tests/chaos_checker.py: its drivers keep every invariant on a healthy broker and across a broker
SIGKILL, and each of its checks fails when fed records that break it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from kafkakit.admin import Admin
from kafkakit.structs import NewTopic

from tests.brokers import BrokerMinProcess, RunningBroker, new_topic_name
from tests.chaos_checker import (
    Ack,
    ChaosReport,
    ChaosViolation,
    ClientName,
    CommitEvent,
    Consumed,
    LogRecord,
    SendFailure,
    TransactionalCopier,
    VerifiableConsumer,
    VerifiableProducer,
    check,
    verify,
    wait_copied,
    wait_read,
)

PARTITIONS = 4


async def create_topics(servers: str, *names: str) -> None:
    async with Admin(bootstrap_servers=servers) as admin:
        await admin.create_topics([NewTopic(name, num_partitions=PARTITIONS) for name in names])


# -- the checks, fed records by hand ----------------------------------------------------------------


def clean_run() -> tuple[list[Ack], list[LogRecord], list[Consumed], list[CommitEvent]]:
    """Two keys, three values each, in partitions 0 and 1; read by one member with two commits."""
    acks: list[Ack] = []
    log: list[LogRecord] = []
    for i in range(6):
        key, value, partition = f"key-{i % 2}", i // 2, i % 2
        acks.append(Ack(key, value, partition, i // 2, 0.1 * i))
        log.append(LogRecord(partition, i // 2, key, value))
    consumed = [Consumed(r.partition, r.offset, r.key, r.value, 1.0 + 0.1 * n) for n, r in enumerate(log)]
    commits = [CommitEvent({0: 2, 1: 2}, 1.0, 1.1, "m1"), CommitEvent({0: 3, 1: 3}, 1.2, 1.3, "m1")]
    return acks, log, consumed, commits


def test_clean_records_pass_and_make_a_table_row() -> None:
    acks, log, consumed, commits = clean_run()
    report = check(
        acks=acks, log=log, consumed=consumed, commits=commits, final_committed={0: 3, 1: 3},
        log_end={0: 3, 1: 3}, copy_input=log, copy_output=list(reversed(log)), label="clean", client="kafkakit",
    )  # fmt: skip
    report.raise_if_violated()
    assert (report.acked, report.read, report.consumed, report.commits) == (6, 6, 6, 2)
    assert (report.copy_in, report.copy_out) == (6, 6)
    assert report.max_ack_gap == pytest.approx(0.1)
    row = report.markdown_row()
    assert row.startswith("| clean | kafkakit | 6 | 6 |") and row.endswith("| ok |")
    assert row.count("|") == ChaosReport.markdown_header().splitlines()[0].count("|")


def assert_violation(report: ChaosReport, words: str) -> None:
    assert any(v.startswith(words) for v in report.violations), report.violations
    with pytest.raises(ChaosViolation, match=words):
        report.raise_if_violated()
    assert words in report.markdown_row()


def test_a_lost_record_is_reported() -> None:
    acks, log, _, _ = clean_run()
    report = check(acks=acks, log=[r for r in log if (r.key, r.value) != ("key-1", 1)])
    assert report.lost == [("key-1", 1)]
    assert_violation(report, "acknowledged records lost")


def test_a_duplicate_is_reported_for_idempotent_producers_only() -> None:
    acks, log, _, _ = clean_run()
    doubled = [*log, LogRecord(0, 3, "key-0", 2)]
    report = check(acks=acks, log=doubled)
    assert report.duplicates == [("key-0", 2)] and not report.reordered
    assert_violation(report, "duplicated records")
    assert check(acks=acks, log=doubled, idempotent=False).ok


def test_a_reordering_is_reported() -> None:
    acks, _, _, _ = clean_run()
    log = [LogRecord(0, 0, "key-0", 0), LogRecord(0, 1, "key-0", 2), LogRecord(0, 2, "key-0", 1)]
    log += [LogRecord(1, n, "key-1", n) for n in range(3)]
    report = check(acks=acks, log=log)
    assert report.reordered == [("key-0", 0, 2, 1)] and not report.lost and not report.duplicates
    assert_violation(report, "records out of order")


def test_a_backward_commit_is_reported() -> None:
    acks, log, consumed, commits = clean_run()
    backward = [*commits, CommitEvent({0: 1}, 2.0, 2.1, "m2")]
    report = check(acks=acks, log=log, consumed=consumed, commits=backward)
    assert report.commits_backward == ["p0: 3 (m1) -> 1 (m2 at 2.000)"]
    assert_violation(report, "committed offsets moved backward")
    # A failed commit does not count; commits are ordered by when they were sent, not answered.
    failed = CommitEvent({0: 1}, 2.0, 2.1, "m2", error="CommitFailedError")
    late_answer = CommitEvent({0: 1}, 0.5, 5.0, "m0")
    assert check(acks=acks, log=log, commits=[*commits, failed, late_answer]).ok
    # The final OffsetFetch behind the last successful commit, or past the log end.
    behind = check(acks=acks, log=log, commits=commits, final_committed={0: 2, 1: 3}, log_end={0: 3, 1: 3})
    assert behind.commits_backward == ["p0: final OffsetFetch 2 < committed 3"]
    past = check(acks=acks, log=log, commits=commits, final_committed={0: 3, 1: 4}, log_end={0: 3, 1: 3})
    assert past.commits_backward == ["p1: final OffsetFetch 4 > log end 3"]


def test_group_misses_aborted_records_and_copy_errors_are_reported() -> None:
    acks, log, consumed, _ = clean_run()
    missed = check(acks=acks, log=log, consumed=consumed[1:])
    assert missed.consumer_missed == [("key-0", 0)]
    assert_violation(missed, "acknowledged records the group never read")
    aborted = [SendFailure("key-0", 2, 1.0, "TransactionAbortedError", aborted=True)]
    visible = check(acks=acks[:-2], log=log, failures=aborted)
    assert visible.aborted_visible == [("key-0", 2)]
    assert_violation(visible, "records of aborted transactions visible")
    assert check(acks=acks, log=log, failures=[SendFailure("key-0", 2, 1.0, "timeout")]).ok  # may be written
    lost_copy = check(copy_input=log, copy_output=log[1:])
    assert lost_copy.copy_lost == [("key-0", 0)]
    assert_violation(lost_copy, "copier input records missing")
    doubled_copy = check(copy_input=log, copy_output=[*log, log[3]])
    assert doubled_copy.copy_duplicates == [("key-1", 1)]
    assert_violation(doubled_copy, "copier output records duplicated")


def test_stalls_are_measured() -> None:
    acks = [Ack("key-0", n, 0, n, t) for n, t in enumerate([10.0, 10.1, 13.6, 13.7])]
    report = check(acks=acks, log=[LogRecord(0, a.offset, a.key, a.value) for a in acks])
    assert report.max_ack_gap == pytest.approx(3.5) and report.max_ack_gap_at == pytest.approx(0.1)


# -- real runs --------------------------------------------------------------------------------------


async def stop_all(*drivers: VerifiableProducer | VerifiableConsumer | TransactionalCopier) -> None:
    await asyncio.gather(*(d.stop(timeout=30) for d in drivers))


async def test_fault_free_run_keeps_every_invariant(
    broker: RunningBroker, topic_factory: Callable[[], str]
) -> None:
    servers = broker.bootstrap_servers
    source, sink, group = topic_factory(), topic_factory(), new_topic_name("g")
    await create_topics(servers, source, sink)
    producer = VerifiableProducer(servers, source, max_records=2000)
    members = [
        VerifiableConsumer(
            servers, source, group, group_instance_id=f"{group}-{i}", assignor="range", name=f"m{i}"
        )
        for i in range(2)
    ]
    copier = TransactionalCopier(servers, source, sink, new_topic_name("copy"), new_topic_name("txn"))
    started = time.monotonic()
    for driver in (*members, copier):
        await driver.start()
    await producer.run()
    await wait_read(members, producer.acks, timeout=60)
    await wait_copied([copier], 2000, timeout=60)
    await stop_all(*members, copier)
    report = await verify(servers, producer=producer, consumers=members, copiers=[copier], label="fault-free")
    print(f"{time.monotonic() - started:.1f}s {report}")
    report.raise_if_violated()
    assert (report.sent, report.acked, report.read, report.failed) == (2000, 2000, 2000, 0)
    assert not report.lost and not report.duplicates and not report.reordered
    assert report.consumed >= 2000 and report.commits > 0 and not report.commits_backward
    assert (report.copy_in, report.copy_out) == (2000, 2000) and copier.copied == 2000
    assert report.rebalances >= 2  # each member was assigned partitions at least once
    assert 0 < report.max_ack_gap < 5


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
async def test_other_clients_run_in_the_same_drivers(
    broker: RunningBroker, topic_factory: Callable[[], str], client: ClientName
) -> None:
    servers = broker.bootstrap_servers
    source = topic_factory()
    await create_topics(servers, source)
    producer = VerifiableProducer(servers, source, client=client, max_records=500)
    member = VerifiableConsumer(servers, source, new_topic_name("g"), client=client)
    await member.start()
    await producer.run()
    await wait_read([member], producer.acks, timeout=60)
    await member.stop()
    report = await verify(servers, producer=producer, consumers=[member], label="fault-free")
    report.raise_if_violated()
    assert (report.client, report.acked, report.read, report.failed) == (client, 500, 500, 0)
    assert report.commits > 0 and report.consumed >= 500


async def test_transactional_producer_acknowledges_at_commit(
    broker: RunningBroker, topic_factory: Callable[[], str]
) -> None:
    servers = broker.bootstrap_servers
    source = topic_factory()
    await create_topics(servers, source)
    producer = VerifiableProducer(
        servers, source, max_records=300, transactional_id=new_topic_name("txn"), transaction_size=40
    )
    await producer.run()
    report = await verify(servers, producer=producer, label="transactional")
    report.raise_if_violated()
    assert (report.acked, report.read) == (300, 300)
    assert len({a.time for a in producer.acks}) == 8  # 7 full transactions and the rest: one time each


async def test_broker_sigkill_and_restart_keeps_every_invariant(broker_min_process: BrokerMinProcess) -> None:
    servers = broker_min_process.bootstrap_servers
    source, sink = new_topic_name("crash-in"), new_topic_name("crash-out")
    await create_topics(servers, source, sink)
    fast = {"request_timeout_ms": 5000}
    producer = VerifiableProducer(servers, source, max_records=3000, rate=1000, settings=fast)
    group_settings = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "request_timeout_ms": 5000}
    members = [
        VerifiableConsumer(servers, source, "crash-group", settings=group_settings, name=f"m{i}")
        for i in range(2)
    ]
    copier = TransactionalCopier(
        servers,
        source,
        sink,
        "crash-copier",
        "crash-txn",
        consumer_settings=group_settings,
        producer_settings=fast,
    )
    for driver in (*members, copier):
        await driver.start()
    await producer.start()
    await producer.wait_acked(1000, timeout=30)
    broker_min_process.kill()
    killed_at = time.monotonic()
    await asyncio.sleep(0.5)
    broker_min_process.restart()
    await producer.wait_acked(3000, timeout=60)
    await producer.stop()
    await wait_read(members, producer.acks, timeout=60)
    await wait_copied([copier], 3000, timeout=60)
    await stop_all(*members, copier)
    report = await verify(
        servers, producer=producer, consumers=members, copiers=[copier], label="broker SIGKILL"
    )
    print(
        report, f"\nkilled at +{killed_at - (producer.started_at or 0):.1f}s", *report.errors[:20], sep="\n"
    )
    report.raise_if_violated()
    assert report.acked == 3000 and report.read == 3000 and report.failed == 0
    assert (report.copy_in, report.copy_out) == (3000, 3000)
    assert report.max_ack_gap > 0.4  # the producer did stall while the broker was down


def test_wait_read_failure_names_who_read_around_the_unread_records() -> None:
    """A member that jumped over records (read both sides of the gap) is named with when it did."""
    from tests.chaos_drivers import _where_reads_stopped

    member = VerifiableConsumer("unused:9092", "t", "g", name="m0")
    other = VerifiableConsumer("unused:9092", "t", "g", name="m1")
    member.records.extend(Consumed(1, o, "key-1", o, 10.0 + o, "m0") for o in (*range(50), *range(100, 120)))
    other.records.extend(Consumed(0, o, "key-0", o, 5.0, "m1") for o in range(30))
    unread = [Ack("key-1", o, 1, o, 1.0) for o in range(50, 100)]
    text = _where_reads_stopped([member, other], unread)
    assert "unread offsets by partition {1: '50-99 (50)'}" in text
    assert "{1: 'm0 read 49 at 59.0 / m0 read 100 at 110.0'}" in text
    assert "m1: last read {0: (29, 5.0)}" in text
