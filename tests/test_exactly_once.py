"""Exactly-once across crashes: a consume-transform-produce pipeline killed with SIGKILL.

The pipeline (a group consumer with read_committed and a transactional producer
committing the consumer's offsets in each transaction) runs in a child process,
``python tests/test_exactly_once.py ...``, so it can be SIGKILLed at chosen
points; the broker is a subprocess too (``broker_min_process``) so it can be
killed and restarted on the same data directory. After each scenario the
pipeline is restarted until it finishes, and a read_committed checker proves
that every input record appears exactly once in the output.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition

PARTITIONS = 3
RECORDS = 300
BATCH = 20  # max_poll_records: ~15 transactions per run
REPO = Path(__file__).resolve().parent.parent

# -- the pipeline (child process) -------------------------------------------------------------


def transform(value: bytes) -> bytes:
    return b"out:" + value


async def maybe_crash(point: str, batch: int) -> None:
    """SIGKILL this process, or wait for the test's go-ahead, where the environment asks for it."""
    if os.environ.get("EOS_CRASH_POINT") == point and int(os.environ.get("EOS_CRASH_BATCH", "-1")) == batch:
        print(f"crash at {point} of batch {batch}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("EOS_HOLD_POINT") == point and int(os.environ.get("EOS_HOLD_BATCH", "-1")) == batch:
        print(f"holding at {point} of batch {batch}", flush=True)
        release = Path(os.environ["EOS_RELEASE_FILE"])
        while not release.exists():  # the test kills and restarts the broker meanwhile
            await asyncio.sleep(0.05)


async def pipeline(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    """Consume ``source``, write transformed records to ``sink``, offsets in the same transaction.

    Returns when the group's position reaches the end of ``source`` (fully
    produced before the pipeline starts). Any error propagates: the process
    exits non-zero and the test restarts it, as a supervisor would.
    """
    pause = float(os.environ.get("EOS_PAUSE_S", "0"))
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=f"{group}-0",  # a restarted instance takes over without a rebalance wait
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=BATCH,
        fetch_max_wait_ms=100,
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
        request_timeout_ms=8000,
    )
    consumer.subscribe([source])
    producer = Producer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        request_timeout_ms=5000,
        delivery_timeout_ms=15000,
    )
    async with producer, consumer:
        await producer.init_transactions()  # fences the killed instance, aborts its open transaction
        print("initialised", flush=True)
        end = await consumer.end_offsets([TopicPartition(source, p) for p in range(PARTITIONS)])
        batch = 0
        while True:
            batches = await consumer.getmany(timeout_ms=300)
            if not batches:
                if consumer.assignment() and {tp: await consumer.position(tp) for tp in end} == end:
                    print("done", flush=True)
                    return
                continue
            # The generation these records belong to: if the group rebalances in the background
            # before the commit (e.g. the broker restarted), the positions may have been reset to
            # the committed offsets, and TxnOffsetCommit must then fail (KIP-447) rather than
            # commit this batch's offsets under the new generation.
            group_metadata = consumer.group_metadata()
            batch += 1
            async with producer.transaction():
                for records in batches.values():
                    for record in records:
                        await producer.send(sink, value=transform(record.value or b""), key=record.key)
                await producer.flush()
                await maybe_crash("sent", batch)  # outputs written, offsets not yet in the transaction
                offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
                await producer.send_offsets_to_transaction(offsets, group_metadata)
                await maybe_crash("offsets", batch)  # offsets pending in the group, EndTxn not sent
            spans = " ".join(
                f"{tp.partition}:{r[0].offset}-{r[-1].offset}" for tp, r in sorted(batches.items())
            )
            print(f"committed {batch} {spans}", flush=True)
            if pause:
                await asyncio.sleep(pause)


# -- the test side ---------------------------------------------------------------------------


class Names:
    def __init__(self, prefix: str) -> None:
        stamp = f"{os.getpid()}-{time.monotonic_ns()}"
        self.source = f"{prefix}-in-{stamp}"
        self.sink = f"{prefix}-out-{stamp}"
        self.group = f"{prefix}-group-{stamp}"
        self.transactional_id = f"{prefix}-txn-{stamp}"


def start_pipeline(bootstrap: str, names: Names, **env: str) -> subprocess.Popen[str]:
    args = [bootstrap, names.source, names.sink, names.group, names.transactional_id]
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


def wait_for_line(proc: subprocess.Popen[str], wanted: str, seen: list[str]) -> None:
    """Read the child's output until a line starting with ``wanted`` appears; fail if it exits first."""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line.rstrip())
        if line.startswith(wanted):
            return
    raise AssertionError(f"pipeline ended before {wanted!r}:\n" + "\n".join(seen[-40:]))


def finish(proc: subprocess.Popen[str], seen: list[str], timeout: float = 30) -> int:
    out, _ = proc.communicate(timeout=timeout)
    seen.extend(out.splitlines())
    return proc.returncode


def run_to_completion(bootstrap: str, names: Names, seen: list[str], attempts: int = 5) -> int:
    """Restart the pipeline (no crash this time) until it finishes; the number of runs it took."""
    for attempt in range(1, attempts + 1):
        seen.append(f"--- restart {attempt}")
        if finish(start_pipeline(bootstrap, names), seen) == 0:
            return attempt
    raise AssertionError("the pipeline never finished:\n" + "\n".join(seen[-60:]))


async def setup(bootstrap: str, names: Names) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics(
            [
                NewTopic(names.source, num_partitions=PARTITIONS),
                NewTopic(names.sink, num_partitions=PARTITIONS),
            ]
        )
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(RECORDS):
            await producer.send(names.source, value=b"record %d" % i, key=b"%d" % i, partition=i % PARTITIONS)


async def output(bootstrap: str, topic: str, isolation_level: str = "read_committed") -> Counter[bytes]:
    """Every value of ``topic`` a consumer with ``isolation_level`` sees, counted."""
    timeout = 20
    counts: Counter[bytes] = Counter()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with Consumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while not all([await consumer.position(tp) >= end[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"the checker did not reach {end}"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                counts.update(r.value or b"" for r in records)
    return counts


async def assert_exactly_once(bootstrap: str, names: Names, seen: list[str]) -> None:
    counts = await output(bootstrap, names.sink)
    expected = Counter(transform(b"record %d" % i) for i in range(RECORDS))
    missing = sorted(expected - counts)
    duplicated = sorted(counts - expected)
    log = "\n".join(seen[-40:])
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}\n{log}"
    assert not duplicated, f"{len(duplicated)} duplicated, e.g. {duplicated[:5]}\n{log}"


async def crash_pipeline_then_recover(bootstrap: str, prefix: str, point: str, batch: int) -> list[str]:
    names = Names(prefix)
    await setup(bootstrap, names)
    seen: list[str] = []
    rc = finish(start_pipeline(bootstrap, names, EOS_CRASH_POINT=point, EOS_CRASH_BATCH=str(batch)), seen)
    assert rc == -signal.SIGKILL, f"the pipeline should have been killed at {point}:\n" + "\n".join(seen)
    assert f"crash at {point} of batch {batch}" in seen
    await asyncio.to_thread(run_to_completion, bootstrap, names, seen)
    await assert_exactly_once(bootstrap, names, seen)
    # the killed instance's flushed outputs are in the log, aborted: the check above was not vacuous
    written = sum((await output(bootstrap, names.sink, "read_uncommitted")).values())
    assert written > RECORDS, f"only {written} records written: the crash left no uncommitted output"
    return seen


# -- scenarios -------------------------------------------------------------------------------


async def kill_broker_while_pipeline_holds(broker: Any, tmp_path: Path, prefix: str, point: str) -> None:
    """Hold the pipeline at ``point`` of batch 4, SIGKILL and restart the broker, let it go on, finish."""
    bootstrap = broker.bootstrap_servers
    names = Names(prefix)
    await setup(bootstrap, names)
    release = tmp_path / "release"
    seen: list[str] = []
    env = {"EOS_HOLD_POINT": point, "EOS_HOLD_BATCH": "4", "EOS_RELEASE_FILE": str(release)}
    proc = start_pipeline(bootstrap, names, **env)
    try:
        await asyncio.to_thread(wait_for_line, proc, f"holding at {point} of batch 4", seen)
        broker.kill()
        broker.restart()
        release.touch()
        rc = await asyncio.to_thread(finish, proc, seen, 40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc != 0:  # the running instance may give up while the broker is away: a supervisor restarts it
        await asyncio.to_thread(run_to_completion, bootstrap, names, seen)
    await assert_exactly_once(bootstrap, names, seen)


async def test_broker_killed_at_a_random_point(broker_min_process: Any) -> None:
    """SIGKILL the broker while transactions run, restart it on the same directory, finish."""
    bootstrap = broker_min_process.bootstrap_servers
    names = Names("eos-broker-kill-any")
    await setup(bootstrap, names)
    seen: list[str] = []
    proc = start_pipeline(bootstrap, names, EOS_PAUSE_S="0.05")
    try:
        await asyncio.to_thread(wait_for_line, proc, "committed 4 ", seen)
        broker_min_process.kill()
        broker_min_process.restart()
        rc = await asyncio.to_thread(finish, proc, seen, 40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc != 0:
        await asyncio.to_thread(run_to_completion, bootstrap, names, seen)
    await assert_exactly_once(bootstrap, names, seen)


async def test_broker_killed_mid_transaction(broker_min_process: Any, tmp_path: Path) -> None:
    """Outputs of the open transaction flushed, then the broker dies and comes back: the pipeline finishes."""
    await kill_broker_while_pipeline_holds(broker_min_process, tmp_path, "eos-broker-kill", "sent")


async def test_broker_killed_with_transactional_offsets_pending(
    broker_min_process: Any, tmp_path: Path
) -> None:
    """The broker dies after acknowledging TxnOffsetCommit, before EndTxn arrives."""
    await kill_broker_while_pipeline_holds(broker_min_process, tmp_path, "eos-broker-kill-offsets", "offsets")


async def test_pipeline_killed_after_sending_before_commit(broker_min_process: Any) -> None:
    """Outputs written, the transaction neither committed nor aborted: the next instance aborts it."""
    await crash_pipeline_then_recover(broker_min_process.bootstrap_servers, "eos-sent", "sent", 3)


async def test_pipeline_killed_with_offsets_pending(broker_min_process: Any) -> None:
    """Killed after TxnOffsetCommit, before EndTxn: the pending offsets must not apply (KIP-447)."""
    await crash_pipeline_then_recover(broker_min_process.bootstrap_servers, "eos-offsets", "offsets", 3)


async def test_pipeline_killed_before_commit_on_kafka(kafka_broker: Any) -> None:
    """The same crash against Apache Kafka."""
    await crash_pipeline_then_recover(kafka_broker.bootstrap_servers, "eos-kafka", "sent", 3)


if __name__ == "__main__":
    asyncio.run(pipeline(*sys.argv[1:6]))
