"""Exactly-once Spark pipeline, topic A -> transform -> topic B, with failures at each protocol step.

The streaming query runs in a child process (``python tests/spark/test_exactly_once_pipeline.py ...``,
``local[2,3]`` so Spark retries failed tasks) and is driven through three runs
against one checkpoint, with test-only failpoints (KAFKAKIT_SPARK_TEST_FAILPOINTS):

run 1: in batch 0, partition 0's attempt 0 raises inside write() after delivering rows and
       partition 1's attempt 0 kills its Python worker with os._exit inside write() (Spark
       retries both as attempt 1); batch 1 holds right after DECIDED, before any EndTxn, and
       the test SIGKILLs the whole driver (JVM, Python workers and all).
run 2: restarted from the checkpoint: batch 1 re-runs (its tasks skip, commit rolls forward);
       batch 2 holds after every task prepared, before DECIDED; SIGKILLed again.
run 3: restarted: batch 2 re-runs from scratch (stale transactions aborted), batch 3 follows.
(Against Apache Kafka, run 2 is left out to save a Spark start-up; test_sink_two_phase.py covers
that step there.)

Then a read_committed consumer of B must see every input record exactly once, and no
transaction may be left open on B.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

# This file is also the child query's script (python tests/spark/...): make `tests` importable.
REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.spark.versions import requires_read_limit_api  # noqa: E402

BATCHES = 4
PER_BATCH = 40
PARTITIONS = 2


def transform(value: bytes) -> bytes:
    return b"out:" + value


# -- the query (child process) ----------------------------------------------------------------------


def run_query(args: argparse.Namespace) -> None:
    from kafkakit.spark import local_session

    spark = local_session("kafkakit-eos-test", "local[2,3]", **{"spark.sql.shuffle.partitions": "2"})
    stream = (
        spark.readStream.format("kafkakit")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .load()
        .selectExpr("value")
    )
    out = stream.repartition(PARTITIONS, "value").selectExpr(
        "value as key", "concat(cast('out:' as binary), value) as value"
    )
    query = (
        out.writeStream.format("kafkakit")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", args.prefix)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"query finished: {len(query.recentProgress)} batches", flush=True)
    spark.stop()


# -- the test (parent) ------------------------------------------------------------------------------------


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # field 6 of /proc/PID/stat: the session id
                pids.append(int(entry.name))
    return pids


def _kill_session(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the driver and everything it started (the Python daemon sets its own process group)."""
    for pid in _session_pids(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


def _start(args: list[str], failpoints: str | None, log: Path) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("KAFKAKIT_SPARK_TEST_FAILPOINTS", None)
    if failpoints:
        env["KAFKAKIT_SPARK_TEST_FAILPOINTS"] = failpoints
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        env=env,
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # one session: _kill_session finds every process of this driver
    )


def _run_until(proc: subprocess.Popen[str], signal_file: Path | None, log: Path, timeout: float) -> None:
    """Wait for the run to finish (no signal file) or to reach its failpoint hold, then kill it."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if signal_file is not None and signal_file.exists():
                _kill_session(proc)
                return
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the query did not get there in {timeout}s:\n{log.read_text()[-4000:]}")
        assert signal_file is None, f"the query ended before its failpoint:\n{log.read_text()[-4000:]}"
        assert proc.returncode == 0, log.read_text()[-6000:]
    finally:
        if proc.poll() is None:
            _kill_session(proc)


@requires_read_limit_api
@pytest.mark.timeout(900)
def test_exactly_once_through_task_worker_and_driver_failures(broker: object, tmp_path: Path) -> None:
    from tests.brokers import new_topic_name
    from tests.spark.sink_support import create_topic_map, produce, read_topic

    bootstrap: str = broker.bootstrap_servers  # type: ignore[attr-defined]
    source, output, prefix = new_topic_name("eos-a"), new_topic_name("eos-b"), new_topic_name("eos")
    create_topic_map(bootstrap, {source: PARTITIONS, output: PARTITIONS})
    inputs = [b"r%04d" % i for i in range(BATCHES * PER_BATCH)]
    produce(bootstrap, source, inputs, PARTITIONS)
    args = [
        "--bootstrap", bootstrap, "--output", output, "--prefix", prefix,
        "--checkpoint", str(tmp_path / "checkpoint"), "--input", source,
    ]  # fmt: skip
    log = tmp_path / "query.log"
    hold1, hold2 = tmp_path / "hold-after-decided", tmp_path / "hold-before-decided"
    run1 = f"write.after_rows:0:0:0:raise;write.after_rows:0:1:0:exit;commit.after_decided:1:*:*:hold:{hold1}"
    _run_until(_start(args, run1, log), hold1, log, 300)
    if broker.kind == "broker_min":  # type: ignore[attr-defined]
        # Apache Kafka skips this run to save a Spark start-up: the same step is covered
        # there by test_sink_two_phase.py::test_driver_dies_before_decided_then_the_rerun_replaces_the_batch.
        _run_until(_start(args, f"commit.before_decided:2:*:*:hold:{hold2}", log), hold2, log, 300)
    _run_until(_start(args, None, log), None, log, 300)
    text = log.read_text()
    assert (
        "test failpoint write.after_rows: raise" in text and "test failpoint write.after_rows: exit" in text
    )

    records = read_topic(bootstrap, output)
    counts = Counter(r.value for r in records)
    duplicates = {v: n for v, n in counts.items() if n > 1}
    missing = [v for v in inputs if transform(v) not in counts]
    assert not duplicates and not missing, f"duplicates {list(duplicates)[:5]}, missing {missing[:5]}"
    assert sorted(counts) == sorted(transform(v) for v in inputs)
    assert all(r.value == transform(r.key) for r in records)
    everything = read_topic(bootstrap, output, isolation="read_uncommitted")
    assert len(everything) > len(records), "the failures should have left aborted rows behind"


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--output", "--prefix", "--checkpoint"):
        parser.add_argument(name, required=True)
    run_query(parser.parse_args())


if __name__ == "__main__":
    main()
