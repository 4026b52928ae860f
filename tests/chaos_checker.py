"""The checker of kafkakit issue 11 (multi-broker resilience): invariants computed from what the drivers recorded.

A scenario runs the drivers of tests/chaos_drivers.py (re-exported here)
against any bootstrap servers while it injects faults::

    producer = VerifiableProducer(servers, topic, client="kafkakit", rate=500, max_records=5000)
    members = [VerifiableConsumer(servers, topic, "group", name=f"m{i}") for i in range(2)]
    for driver in (*members, producer):
        await driver.start()
    await producer.wait_acked(1000)
    cluster.kill(cluster.leader_of(topic, 0))            # the fault
    await producer.wait_acked(5000); await producer.stop()
    await wait_read(members, producer.acks)              # the group reads everything acked
    for member in members: await member.stop()
    report = await verify(servers, producer=producer, consumers=members, label="leader kill")
    print(report.markdown_row()); report.raise_if_violated()

:func:`verify` reads the topics back from the beginning with a fresh
read_committed consumer and asks the group's committed offsets (OffsetFetch),
then calls :func:`check`, a pure function of recorded data (so tests can feed
it a log with a lost record, a duplicate... and see it caught).  Invariants:

- **lost**: every acknowledged (key, value) is in the topic;
- **duplicates**: each (key, value) is in the topic at most once (idempotent
  or transactional producers);
- **reordered**: the values of a key rise in its partition's offset order;
- **aborted_visible**: no record of a transaction the producer saw abort is
  visible to read_committed;
- **consumer_missed**: the group read every acknowledged record (at least once);
- **commits_backward**: the group's successful commits never move a
  partition's offset back (ordered by when they were sent), and the final
  OffsetFetch is not behind the last of them (nor past the log end);
- **copy_lost / copy_duplicates**: a copier's read_committed output is its
  input, each record exactly once.

Measured, not judged: the longest gap between consecutive acknowledgements
(the failover stall), the same for the group's reads, and the counts.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kafkakit.admin import Admin
from kafkakit.consumer import Consumer
from kafkakit.structs import TopicPartition

from tests.chaos_clients import CLIENTS, ClientName
from tests.chaos_drivers import (
    Ack,
    CommitEvent,
    Consumed,
    CopierEvent,
    RebalanceEvent,
    SendFailure,
    TransactionalCopier,
    VerifiableConsumer,
    VerifiableProducer,
    decode_record,
    wait_copied,
    wait_read,
)

__all__ = [
    "CLIENTS",
    "Ack",
    "ChaosReport",
    "ChaosViolation",
    "ClientName",
    "CommitEvent",
    "Consumed",
    "CopierEvent",
    "LogRecord",
    "RebalanceEvent",
    "SendFailure",
    "TransactionalCopier",
    "VerifiableConsumer",
    "VerifiableProducer",
    "check",
    "fetch_committed",
    "read_topic",
    "verify",
    "wait_copied",
    "wait_read",
]

KeyValue = tuple[str, int]
_EXAMPLES = 5  # how many examples of each violation the report keeps in its message


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record as read back from a topic: where it is and what (key, value) it holds."""

    partition: int
    offset: int
    key: str
    value: int


class ChaosViolation(AssertionError):
    """An invariant of a chaos run does not hold; the message lists each one with examples."""


@dataclass
class ChaosReport:
    """Counts, measured stalls and violations of one run; ``markdown_row()`` for docs/reliability.md."""

    label: str = ""
    client: str = ""
    sent: int = 0
    acked: int = 0
    failed: int = 0
    read: int = 0
    foreign: int = 0
    lost: list[KeyValue] = field(default_factory=list)
    duplicates: list[KeyValue] = field(default_factory=list)
    duplicates_allowed: bool = False
    reordered: list[tuple[str, int, int, int]] = field(default_factory=list)  # key, partition, after, value
    aborted_visible: list[KeyValue] = field(default_factory=list)
    consumed: int = 0
    consumer_missed: list[KeyValue] = field(default_factory=list)
    commits: int = 0
    failed_commits: int = 0
    commits_backward: list[str] = field(default_factory=list)
    rebalances: int = 0
    copy_in: int = 0
    copy_out: int = 0
    copy_lost: list[KeyValue] = field(default_factory=list)
    copy_duplicates: list[KeyValue] = field(default_factory=list)
    copy_aborts: int = 0
    max_ack_gap: float = 0.0
    max_ack_gap_at: float = 0.0  # seconds after the first acknowledgement
    max_consume_gap: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        """One line per broken invariant, with a few examples."""
        found: list[str] = []

        def add(name: str, items: Sequence[object]) -> None:
            if items:
                found.append(f"{name}: {len(items)}, e.g. {list(items[:_EXAMPLES])}")

        add("acknowledged records lost", self.lost)
        if not self.duplicates_allowed:
            add("duplicated records", self.duplicates)
        add("records out of order within their key", self.reordered)
        add("records of aborted transactions visible", self.aborted_visible)
        add("acknowledged records the group never read", self.consumer_missed)
        add("committed offsets moved backward", self.commits_backward)
        add("copier input records missing from its output", self.copy_lost)
        add("copier output records duplicated", self.copy_duplicates)
        return found

    @property
    def ok(self) -> bool:
        return not self.violations

    def raise_if_violated(self) -> None:
        """Raise :class:`ChaosViolation` naming every broken invariant (with the counts)."""
        violations = self.violations
        if violations:
            raise ChaosViolation(
                f"{self.label or 'chaos run'}: " + "; ".join(violations) + f"\n{self.summary()}"
            )

    def summary(self) -> str:
        return (
            f"[{self.client}] sent {self.sent}, acked {self.acked}, failed {self.failed}, read {self.read}, "
            f"lost {len(self.lost)}, duplicated {len(self.duplicates)}, reordered {len(self.reordered)}, "
            f"aborted visible {len(self.aborted_visible)}, max ack gap {self.max_ack_gap:.3f}s "
            f"(at +{self.max_ack_gap_at:.1f}s); consumed {self.consumed}, missed {len(self.consumer_missed)}, "
            f"commits {self.commits} ({self.failed_commits} failed), backward {len(self.commits_backward)}, "
            f"rebalances {self.rebalances}, max consume gap {self.max_consume_gap:.3f}s; "
            f"copy {self.copy_in} -> {self.copy_out} (lost {len(self.copy_lost)}, "
            f"duplicated {len(self.copy_duplicates)}, aborts {self.copy_aborts})"
        )

    __str__ = summary

    @staticmethod
    def markdown_header() -> str:
        """The header (two lines) of the table :meth:`markdown_row` rows go in."""
        columns = [
            "scenario", "client", "acked", "read", "failed", "lost", "dup", "reordered",
            "max ack gap (s)", "consumed", "group missed", "commits back", "max consume gap (s)",
            "copied in/out", "verdict",
        ]  # fmt: skip
        return "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)

    def markdown_row(self) -> str:
        """One table row: counts, stalls and ``ok`` or the names of the broken invariants."""
        verdict = "ok" if self.ok else "**" + "; ".join(v.split(":")[0] for v in self.violations) + "**"
        cells = [
            self.label, self.client, str(self.acked), str(self.read), str(self.failed),
            str(len(self.lost)), str(len(self.duplicates)), str(len(self.reordered)),
            f"{self.max_ack_gap:.2f}", str(self.consumed), str(len(self.consumer_missed)),
            str(len(self.commits_backward)), f"{self.max_consume_gap:.2f}",
            f"{self.copy_in}/{self.copy_out}" if self.copy_in or self.copy_out else "-", verdict,
        ]  # fmt: skip
        return "| " + " | ".join(cells) + " |"


def _max_gap(times: Iterable[float]) -> tuple[float, float]:
    """The longest gap between consecutive times and when it started (relative to the first)."""
    ordered = sorted(times)
    best, at = 0.0, 0.0
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after - before > best:
            best, at = after - before, before - ordered[0]
    return best, at


def _log_checks(
    report: ChaosReport, log: Sequence[LogRecord], acks: Sequence[Ack], failures: Sequence[SendFailure]
) -> None:
    counts = Counter((r.key, r.value) for r in log)
    report.read = len(log)
    report.lost = sorted({(a.key, a.value) for a in acks if (a.key, a.value) not in counts})
    report.duplicates = sorted(kv for kv, n in counts.items() if n > 1)
    report.aborted_visible = sorted(
        {(f.key, f.value) for f in failures if f.aborted and (f.key, f.value) in counts}
    )
    seen: dict[str, set[int]] = defaultdict(set)
    highest: dict[tuple[str, int], int] = {}
    for r in sorted(log, key=lambda r: (r.partition, r.offset)):
        first_time = r.value not in seen[r.key]
        seen[r.key].add(r.value)
        top = highest.get((r.key, r.partition))
        if top is not None and r.value < top and first_time:
            report.reordered.append((r.key, r.partition, top, r.value))
        if top is None or r.value > top:
            highest[(r.key, r.partition)] = r.value


def _commit_checks(
    report: ChaosReport,
    commits: Sequence[CommitEvent],
    final_committed: Mapping[int, int] | None,
    log_end: Mapping[int, int] | None,
) -> None:
    report.commits = sum(1 for c in commits if c.ok)
    report.failed_commits = len(commits) - report.commits
    last: dict[int, tuple[int, str]] = {}
    for commit in sorted((c for c in commits if c.ok), key=lambda c: c.start):
        for partition, offset in sorted(commit.offsets.items()):
            before = last.get(partition)
            if before is not None and offset < before[0]:
                report.commits_backward.append(
                    f"p{partition}: {before[0]} ({before[1]}) -> {offset} ({commit.member} at {commit.start:.3f})"
                )
            if before is None or offset >= before[0]:
                last[partition] = (offset, commit.member)
    for partition, offset in sorted((final_committed or {}).items()):
        before = last.get(partition)
        if before is not None and offset < before[0]:
            report.commits_backward.append(
                f"p{partition}: final OffsetFetch {offset} < committed {before[0]}"
            )
        if log_end is not None and offset > log_end.get(partition, offset):
            report.commits_backward.append(
                f"p{partition}: final OffsetFetch {offset} > log end {log_end[partition]}"
            )


def check(
    *,
    acks: Iterable[Ack] = (),
    failures: Iterable[SendFailure] = (),
    log: Iterable[LogRecord] = (),
    idempotent: bool = True,
    sent: int | None = None,
    consumed: Iterable[Consumed] | None = None,
    commits: Iterable[CommitEvent] = (),
    rebalances: Iterable[RebalanceEvent] = (),
    final_committed: Mapping[int, int] | None = None,
    log_end: Mapping[int, int] | None = None,
    copy_input: Iterable[LogRecord] | None = None,
    copy_output: Iterable[LogRecord] | None = None,
    copier_events: Iterable[CopierEvent] = (),
    foreign: int = 0,
    errors: Iterable[str] = (),
    label: str = "",
    client: str = "",
) -> ChaosReport:
    """The report of one run, from plain records (see the module docstring for each invariant).

    ``log`` is the produced topic read back with read_committed from the
    beginning; ``consumed`` (None: no consumer group ran) what the group's
    members read, ``commits`` their commits, ``final_committed`` the group's
    OffsetFetch at the end and ``log_end`` the topic's end offsets;
    ``copy_input``/``copy_output`` a copier's topics read back.
    """
    acks, failures, log = list(acks), list(failures), list(log)
    report = ChaosReport(label=label, client=client, foreign=foreign, errors=list(errors))
    report.acked, report.failed = len(acks), len(failures)
    report.sent = sent if sent is not None else len(acks) + len(failures)
    report.duplicates_allowed = not idempotent
    _log_checks(report, log, acks, failures)
    report.max_ack_gap, report.max_ack_gap_at = _max_gap(a.time for a in acks)
    if consumed is not None:
        reads = list(consumed)
        report.consumed = len(reads)
        read_pairs = {(r.key, r.value) for r in reads}
        report.consumer_missed = sorted(
            {(a.key, a.value) for a in acks if (a.key, a.value) not in read_pairs}
        )
        report.max_consume_gap = _max_gap(r.time for r in reads)[0]
    _commit_checks(report, list(commits), final_committed, log_end)
    report.rebalances = sum(1 for r in rebalances if r.kind == "assigned")
    if copy_input is not None and copy_output is not None:
        source = Counter((r.key, r.value) for r in copy_input)
        sink = Counter((r.key, r.value) for r in copy_output)
        report.copy_in, report.copy_out = sum(source.values()), sum(sink.values())
        report.copy_lost = sorted((source - sink).elements())
        report.copy_duplicates = sorted((sink - source).elements())
    report.copy_aborts = sum(1 for e in copier_events if not e.committed)
    return report


async def read_topic(
    bootstrap_servers: str, topic: str, *, isolation_level: str = "read_committed", timeout: float = 60.0
) -> tuple[list[LogRecord], dict[int, int], int]:
    """Every record of ``topic`` from the beginning with a fresh consumer (no group).

    Returns the records written by a VerifiableProducer, the end offsets it
    read up to, and how many other records it skipped.
    """
    records: list[LogRecord] = []
    foreign = 0
    async with Consumer(
        bootstrap_servers=bootstrap_servers,
        isolation_level=isolation_level,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    ) as consumer:
        partitions = await _partitions(bootstrap_servers, topic)
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while not all([await consumer.position(tp) >= end[tp] for tp in tps]):
            if time.monotonic() > deadline:
                positions = {tp.partition: await consumer.position(tp) for tp in tps}
                raise TimeoutError(f"read_topic({topic}): at {positions}, end {end} after {timeout}s")
            for tp, batch in (await consumer.getmany(timeout_ms=200)).items():
                for r in batch:
                    decoded = decode_record(r.key, r.value)
                    if decoded is None:
                        foreign += 1
                    else:
                        records.append(LogRecord(tp.partition, r.offset, decoded[0], decoded[1]))
    return records, {tp.partition: offset for tp, offset in end.items()}, foreign


async def _partitions(bootstrap_servers: str, topic: str) -> list[int]:
    # Admin, not Consumer.topics(): that does not fill the cache partitions_for_topic() reads.
    async with Admin(bootstrap_servers=bootstrap_servers) as admin:
        (description,) = await admin.describe_topics([topic])
    return sorted(p.partition for p in description.partitions)


async def fetch_committed(
    bootstrap_servers: str, group_id: str, topic: str, partitions: Iterable[int]
) -> dict[int, int]:
    """The group's committed offsets for ``topic`` (OffsetFetch); partitions without one are left out."""
    async with Consumer(
        bootstrap_servers=bootstrap_servers, group_id=group_id, enable_auto_commit=False
    ) as consumer:
        found = await consumer.committed_offsets([TopicPartition(topic, p) for p in partitions])
    return {tp.partition: meta.offset for tp, meta in found.items()}


async def verify(
    bootstrap_servers: str,
    *,
    producer: VerifiableProducer | None = None,
    topic: str | None = None,
    consumers: Sequence[VerifiableConsumer] = (),
    copiers: Sequence[TransactionalCopier] = (),
    label: str = "",
    timeout: float = 60.0,
) -> ChaosReport:
    """Read back what the (stopped) drivers wrote and check it: one report for the producer's topic,
    its consumer group (all ``consumers`` must share one group) and the copiers (one input and output).

    Passing ``consumers`` asserts the group read every acknowledged record:
    wait for that (:func:`wait_read`) before stopping them; likewise
    :func:`wait_copied` for copiers.  Stop the drivers first: an open
    transaction would hold read_committed back.
    """
    topic = topic or (producer.topic if producer is not None else None)
    if topic is None:
        topic = copiers[0].input_topic if copiers else None
    if topic is None:
        raise ValueError("verify() needs a producer, a topic or copiers")
    log, end, foreign = await read_topic(bootstrap_servers, topic, timeout=timeout)
    groups = {c.group_id for c in consumers}
    if len(groups) > 1:
        raise ValueError(f"verify() takes the members of one group, got {sorted(groups)}")
    final: dict[int, int] | None = None
    if groups:
        final = await fetch_committed(bootstrap_servers, groups.pop(), topic, end)
    copy_input: list[LogRecord] | None = None
    copy_output: list[LogRecord] | None = None
    if copiers:
        inputs = {c.input_topic for c in copiers}
        outputs = {c.output_topic for c in copiers}
        if len(inputs) != 1 or len(outputs) != 1:
            raise ValueError("verify() takes copiers of one input and one output topic")
        copy_input = (
            log
            if inputs == {topic}
            else (await read_topic(bootstrap_servers, inputs.pop(), timeout=timeout))[0]
        )
        copy_output = (await read_topic(bootstrap_servers, outputs.pop(), timeout=timeout))[0]
    drivers: list[VerifiableProducer | VerifiableConsumer | TransactionalCopier] = [*consumers, *copiers]
    if producer is not None:
        drivers.insert(0, producer)
    return check(
        acks=producer.acks if producer else (),
        failures=producer.failures if producer else (),
        log=log,
        idempotent=producer.idempotent if producer else True,
        sent=producer.sent if producer else None,
        consumed=[r for c in consumers for r in c.records] if consumers else None,
        commits=[e for c in consumers for e in c.commits],
        rebalances=[e for c in consumers for e in c.rebalances] + [e for c in copiers for e in c.rebalances],
        final_committed=final,
        log_end=end,
        copy_input=copy_input,
        copy_output=copy_output,
        copier_events=[e for c in copiers for e in c.events],
        foreign=foreign + sum(c.foreign for c in consumers),
        errors=[f"{d.name}: {e}" for d in drivers for _, e in d.errors],
        label=label,
        client=producer.client if producer else "kafkakit",
    )
