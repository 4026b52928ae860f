"""The exactly-once sink's per-task and per-batch protocol steps, with and without kept clients.

Each micro-batch of an exactly-once query runs, per task, ``TaskTransaction.start``
(control topic read, producer start, InitProducerId, marker) and ``prepare``, and
once on the driver side ``commit_batch`` (control read, DECIDED, EndTxn per task,
DONE).  Inside a Spark worker these run on the worker's event loop
(kafkakit.spark.runtime), where the sink keeps its clients between tasks and
batches; elsewhere (``asyncio.run``) every step makes fresh clients, as every step
did before the clients were kept.  This runs both, interleaved, against one
broker, and prints the median milliseconds per step and the ratio kept / fresh.

    python benchmarks/spark_eos_steps.py --brokers broker_min,kafka --batches 20 --rounds 3
    python benchmarks/spark_eos_steps.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import spark_read  # noqa: E402  (broker start-up)

STEPS = ("task start", "task prepare", "driver commit")


async def _batches(bootstrap: str, batches: int, tasks: int) -> dict[str, list[float]]:
    from kafkakit import Admin, NewTopic
    from kafkakit.spark import two_phase
    from kafkakit.spark.two_phase import TaskIds, TaskTransaction, TwoPhaseConfig

    prefix = f"eos-steps-{uuid.uuid4().hex[:8]}"
    out = f"{prefix}-out"
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(out, tasks)])
    config = TwoPhaseConfig(bootstrap, prefix, f"{prefix}-control", 60000, {"acks": "all"})
    await two_phase.ensure_control_topic(config)
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    value = b"x" * 100
    for batch in range(batches):
        writes = []
        for partition in range(tasks):
            txn = TaskTransaction(config, TaskIds("q", batch, partition, 0))
            started = time.perf_counter()
            assert await txn.start()
            times["task start"].append(time.perf_counter() - started)
            await (await txn.producer.send_batch(out, [value] * 100, partition=partition))
            started = time.perf_counter()
            writes.append(await txn.prepare(100))
            times["task prepare"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await two_phase.commit_batch(config, "q", batch, writes)
        times["driver commit"].append(time.perf_counter() - started)
    return times


def _run(kind: str, coro_factory: Callable[[], Coroutine[Any, Any, dict[str, list[float]]]]) -> Any:
    from kafkakit.spark import runtime

    if kind == "kept":
        return runtime.run(coro_factory(), timeout=600)  # the worker's loop: clients kept
    return asyncio.run(coro_factory())  # a fresh loop per run: fresh clients every step


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"args": vars(args), "brokers": {}}
    with tempfile.TemporaryDirectory(prefix="kafkakit-eos-steps-") as tmp:
        for broker in args.brokers.split(","):
            server = spark_read.start_broker(broker, Path(tmp))
            try:
                bootstrap = server.bootstrap_servers
                _run("fresh", lambda b=bootstrap: _batches(b, 2, args.tasks))  # untimed warm-up
                samples: dict[str, dict[str, list[float]]] = {"fresh": {}, "kept": {}}
                for round_number in range(args.rounds):
                    order = ("fresh", "kept") if round_number % 2 == 0 else ("kept", "fresh")
                    for kind in order:
                        times = _run(kind, lambda b=bootstrap: _batches(b, args.batches, args.tasks))
                        for step, values in times.items():
                            # the first batch of a run starts its clients: left out of both
                            samples[kind].setdefault(step, []).extend(
                                values[args.tasks :] if "task" in step else values[1:]
                            )
                results["brokers"][broker] = {
                    kind: {step: statistics.median(v) * 1000 for step, v in by_step.items()}
                    for kind, by_step in samples.items()
                }
            finally:
                server.stop()
    return results


def report(results: dict[str, Any]) -> None:
    args = results["args"]
    print(
        f"\n{args['batches']} batches x {args['tasks']} tasks per run, {args['rounds']} interleaved rounds; "
        "median ms per step (first batch of each run left out)\n"
    )
    print("| broker | step | fresh clients (ms) | kept clients (ms) | kept / fresh |")
    print("|---|---|---:|---:|---:|")
    for broker, by_kind in results["brokers"].items():
        for step in STEPS:
            fresh, kept = by_kind["fresh"][step], by_kind["kept"][step]
            print(f"| {broker} | {step} | {fresh:.1f} | {kept:.1f} | {kept / fresh:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="seconds: broker_min, 3 batches, 1 round")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.smoke:
        args.brokers, args.batches, args.tasks, args.rounds = "broker_min", 3, 2, 1
    results = measure(args)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
