"""Streaming pipeline throughput, topic A -> transform -> topic B: kafkakit.spark's sink, exactly-once and not.

Pipelines, all in one Spark session (local[2]) against the same broker and input topic, in the same run:

- ``kafkakit-eos``: kafkakit source -> kafkakit sink with ``exactlyOnce=true``;
- ``kafkakit``: kafkakit source -> kafkakit sink, at-least-once (idempotent producer);
- ``spark``: Spark's built-in Kafka connector, source and sink (at-least-once, its only mode).

Each is a streaming query with ``trigger(availableNow=True)`` and
``maxOffsetsPerTrigger`` = records / batches, writing ``upper(value)`` to a
fresh output topic; the clock runs from ``start()`` to the end of the last
micro-batch.  The output is counted afterwards with a read_committed batch read.
Spark's connector jars come from benchmarks/spark_read.py (Maven, cached).

    python benchmarks/spark_sink.py                      # 2,000,000 x 100 B, 10 batches, broker_min and kafka
    python benchmarks/spark_sink.py --smoke              # seconds: broker_min, 20,000 records, kafkakit only
    python benchmarks/spark_sink.py --brokers kafka --records 5000000 --pipelines kafkakit-eos,spark
    python benchmarks/spark_sink.py --write-path --records 1000000 --runs 3   # the sink's write path, no Spark

Each pipeline's result also gives CPU seconds per process group (Spark's JVM, the Python
task workers, Spark's driver-side Python processes, the broker) and Spark's own split of
the micro-batches' time (``durationMs``).

Prints records/s per pipeline and the ratios to Spark's connector.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import spark_read  # noqa: E402  (shares broker start-up, topic filling and the connector jars)

PIPELINES = ("kafkakit-eos", "kafkakit", "spark")
#: Mixed pipelines that split the difference between source and sink (not run by default).
MIXED = ("kafkakit-source", "kafkakit-sink", "kafkakit-sink-eos")


def formats(pipeline: str) -> tuple[str, str]:
    """(source format, sink format) of ``pipeline``."""
    if pipeline == "spark":
        return "kafka", "kafka"
    if pipeline == "kafkakit-source":
        return "kafkakit", "kafka"
    if pipeline.startswith("kafkakit-sink"):
        return "kafka", "kafkakit"
    return "kafkakit", "kafkakit"


def _process_tree() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command, CPU seconds incl. reaped children) of every process (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
        out[int(entry)] = (int(fields[1]), command, cpu)
    return out


def cpu_by_group() -> dict[str, float]:
    """CPU seconds so far of this benchmark's processes: Spark's JVM, its Python processes, the broker, this driver."""
    if not Path("/proc/self/stat").exists():
        return {}
    tree = _process_tree()
    groups: dict[str, float] = {}
    me = os.getpid()

    def group_of(pid: int) -> str | None:
        chain = []
        while pid in tree and pid != me:
            chain.append(pid)
            pid = tree[pid][0]
        if pid != me:
            return None
        top = tree[chain[-1]][1]
        if "SparkSubmit" not in top:
            return "broker"
        if len(chain) == 1:
            return "spark JVM"
        # Spark forks task workers from "pyspark.daemon pyspark.worker"; the driver-side calls
        # (planning, offsets, commits) run in other Python processes.
        return (
            "Python tasks" if tree[chain[-2]][1].rstrip().endswith("pyspark.worker") else "Python driver-side"
        )

    for pid, (_, _, cpu) in tree.items():
        group = "driver" if pid == me else group_of(pid)
        if group is not None:
            groups[group] = groups.get(group, 0.0) + cpu
    return groups


def run_pipeline(
    spark: Any, pipeline: str, bootstrap: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    output = f"sink-bench-{pipeline}-{uuid.uuid4().hex[:8]}"
    source, fmt = formats(pipeline)
    stream = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", spark_read.TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max(1, args.records // args.batches)))
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value")
    )
    writer = (
        stream.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output)
        .option("checkpointLocation", str(workdir / f"checkpoint-{output}"))
        .trigger(availableNow=True)
    )
    if pipeline.endswith("-eos"):
        writer = writer.option("exactlyOnce", "true").option("transactionalIdPrefix", output)
    if fmt == "kafka":
        writer = writer.option("kafka.linger.ms", "5").option("kafka.batch.size", str(1 << 20))
    cpu_before = cpu_by_group()
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    cpu_after = cpu_by_group()
    if query.exception() is not None:
        raise RuntimeError(f"{pipeline}: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    batches = len(progress)
    # Sustained rate: the micro-batches after the first, by Spark's own clock. It leaves out
    # what a long-running query pays once (its start, Spark's per-query Python source
    # runner, the first batch's connections), which a 1-2 M record run weighs heavily.
    later = progress[1:]
    later_s = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
    sustained = sum(p["numInputRows"] for p in later) / later_s if later_s else 0.0
    # Where the micro-batches' time went (Spark's own split: latestOffset, addBatch, commit...).
    phases: dict[str, float] = {}
    for p in query.recentProgress:
        for name, ms in (p["durationMs"] or {}).items():
            phases[name] = phases.get(name, 0.0) + ms / 1000
    written = (
        spark.read.format("kafkakit")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", output)
        .load()
        .count()
    )
    return {
        "seconds": seconds,
        "batches": batches,
        "written": written,
        "records_per_s": args.records / seconds,
        "sustained_records_per_s": sustained,
        "cpu": {k: round(v - cpu_before.get(k, 0.0), 2) for k, v in cpu_after.items()},
        "phases": {k: round(v, 2) for k, v in sorted(phases.items(), key=lambda kv: -kv[1])},
    }


def warm_up(spark: Any, bootstrap: str, pipelines: list[str]) -> None:
    """Untimed: start Spark's Python workers and JVM code paths (the first query pays ~20 s for them)."""
    df = spark.range(1000).selectExpr("cast(id as string) as value")
    for pipeline in pipelines:
        source, fmt = formats(pipeline)
        writer = (
            df.write.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", "sink-bench-warm-up")
        )
        if pipeline.endswith("-eos"):
            writer = writer.option("exactlyOnce", "true").option(
                "transactionalIdPrefix", "sink-bench-warm-up"
            )
        writer.mode("append").save()
        spark.read.format(source).option("kafka.bootstrap.servers", bootstrap).option(
            "subscribe", "sink-bench-warm-up"
        ).load().count()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import pyspark
    from kafkakit.spark import local_session

    import tests.brokers as brokers

    brokers.compile_kafkakit_bytecode()  # as an installed kafkakit has it
    pipelines = args.pipelines.split(",")
    conf = {"spark.driver.memory": "2g"}
    results: dict[str, Any] = {"args": vars(args), "pyspark": pyspark.__version__, "brokers": {}}
    if any("kafka" in formats(p) for p in pipelines):
        version, jars = spark_read.connector_jars(pyspark.__version__)
        conf["spark.jars"] = ",".join(str(j) for j in jars)
        results["connector"] = version
    spark = local_session("kafkakit-spark-sink-bench", args.master, **conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="kafkakit-spark-sink-bench-") as tmp:
            for kind in args.brokers.split(","):
                server = spark_read.start_broker(kind, Path(tmp))
                try:
                    bootstrap = server.bootstrap_servers
                    asyncio.run(spark_read.fill_topic(bootstrap, args.records, args.size, args.partitions))
                    warm_up(spark, bootstrap, pipelines)
                    for pipeline in pipelines if args.warm_up_queries else ():
                        # Untimed: one whole query per pipeline, so that no timed round pays the
                        # JVM's JIT warm-up or the first streaming query's code paths.
                        result = run_pipeline(spark, pipeline, bootstrap, args, Path(tmp))
                        print(f"  {kind} warm-up {pipeline}: {result['seconds']:.1f} s (untimed)", flush=True)
                    rounds: list[dict[str, Any]] = []
                    for run in range(args.runs):
                        # interleaved: every pipeline once per round, the order rotating
                        order = pipelines[run % len(pipelines) :] + pipelines[: run % len(pipelines)]
                        this_round: dict[str, Any] = {}
                        for pipeline in order:
                            result = run_pipeline(spark, pipeline, bootstrap, args, Path(tmp))
                            print(f"  {kind} run {run + 1} {pipeline}: {result}", flush=True)
                            if result["written"] != args.records:
                                raise RuntimeError(
                                    f"{pipeline} wrote {result['written']} of {args.records} records"
                                )
                            this_round[pipeline] = result
                        rounds.append(this_round)
                    results["brokers"][kind] = rounds
                finally:
                    server.stop()
    finally:
        spark.stop()
    return results


def measure_write_path(args: argparse.Namespace) -> dict[str, Any]:
    """The sink's write path without Spark: ``arrow_chunk`` and the at-least-once task writer.

    What a Python worker does with its Arrow input (``upper(value)`` arrives as
    a string column, the key as an all-null binary column), timed in this
    process against each broker: records/s, and how much of it ``arrow_chunk`` is.
    """
    import pyarrow as pa
    from kafkakit import Admin, Consumer, NewTopic, TopicPartition
    from kafkakit.spark import sink

    rows = min(args.records, 100_000)
    value = ("0123456789ABCDEF" * (args.size // 16 + 1))[: args.size]
    batch = pa.RecordBatch.from_arrays(
        [pa.nulls(rows, pa.binary()), pa.array([value] * rows, pa.string())], names=["key", "value"]
    )
    layout = sink.Layout("value", True, key="key")
    chunks = max(1, args.records // rows)
    results: dict[str, Any] = {"args": vars(args), "brokers": {}}
    with tempfile.TemporaryDirectory(prefix="kafkakit-spark-sink-path-") as tmp:
        for kind in args.brokers.split(","):
            server = spark_read.start_broker(kind, Path(tmp))
            try:
                bootstrap = server.bootstrap_servers
                topic = f"sink-path-{uuid.uuid4().hex[:8]}"

                async def create(name: str = topic, servers: str = bootstrap) -> None:
                    async with Admin(bootstrap_servers=servers) as admin:
                        await admin.create_topics([NewTopic(name, num_partitions=args.partitions)])

                asyncio.run(create())
                config = sink.SinkConfig(bootstrap, topic, layout, {"acks": "all"})
                sink.arrow_chunk(batch, layout)  # untimed: its first call imports pyarrow.compute
                started = time.perf_counter()
                for _ in range(chunks):
                    sink.arrow_chunk(batch, layout)
                arrow_s = (time.perf_counter() - started) / chunks
                best: dict[str, Any] = {}
                for run in range(args.runs + 1):  # the first run starts the producer: untimed
                    cpu, started = time.process_time(), time.perf_counter()
                    written = sink._write_at_least_once(
                        config, (sink.arrow_chunk(batch, layout) for _ in range(chunks)), None, 0, run
                    )
                    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
                    if run and (not best or seconds < best["seconds"]):
                        best = {"seconds": seconds, "cpu_s": cpu, "records_per_s": written / seconds}
                    print(f"  {kind} write path run {run}: {written / seconds:,.0f} records/s", flush=True)

                async def stored(name: str = topic, servers: str = bootstrap) -> int:
                    async with Consumer(bootstrap_servers=servers) as consumer:
                        ends = await consumer.end_offsets(
                            [TopicPartition(name, p) for p in range(args.partitions)]
                        )
                    return sum(ends.values())

                expected = chunks * rows * (args.runs + 1)
                if asyncio.run(stored()) != expected:
                    raise RuntimeError(f"the broker holds {asyncio.run(stored())} records, not {expected}")
                count = chunks * rows
                best["ns_per_record"] = best["seconds"] / count * 1e9
                best["arrow_chunk_ns_per_record"] = arrow_s / rows * 1e9
                best["cpu_ns_per_record"] = best["cpu_s"] / count * 1e9
                results["brokers"][kind] = best
            finally:
                server.stop()
    print("\n| broker | records/s | ns/record | CPU ns/record | of which arrow_chunk |")
    print("|---|---:|---:|---:|---:|")
    for kind, r in results["brokers"].items():
        print(
            f"| {kind} | {r['records_per_s']:,.0f} | {r['ns_per_record']:.0f} | {r['cpu_ns_per_record']:.0f} "
            f"| {r['arrow_chunk_ns_per_record']:.0f} |"
        )
    return results


def report(results: dict[str, Any]) -> None:
    """Per round: records/s of each pipeline and its ratio to Spark's connector in that round."""
    import statistics

    args = results["args"]
    print(
        f"\n{args['records']:,} records x {args['size']} B, {args['batches']} micro-batches, "
        f"{args['partitions']} partitions, {args['master']}, pyspark {results['pyspark']}, "
        f"{args['runs']} interleaved round(s)\n"
    )
    print("End to end = records / (query start to last batch). Sustained = micro-batches after the first.\n")
    print("| broker | pipeline | round | end to end records/s | vs Spark | sustained records/s | vs Spark |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind, rounds in results["brokers"].items():
        ratios: dict[str, tuple[list[float], list[float]]] = {}
        for number, out in enumerate(rounds, 1):
            spark = out.get("spark")
            for pipeline, r in out.items():
                cells = [f"{r['records_per_s']:,.0f}", "-", f"{r['sustained_records_per_s']:,.0f}", "-"]
                if spark and pipeline != "spark":
                    end_to_end = r["records_per_s"] / spark["records_per_s"]
                    sustained = r["sustained_records_per_s"] / spark["sustained_records_per_s"]
                    cells[1], cells[3] = f"{end_to_end:.2f}x", f"{sustained:.2f}x"
                    pair = ratios.setdefault(pipeline, ([], []))
                    pair[0].append(end_to_end)
                    pair[1].append(sustained)
                print(f"| {kind} | {pipeline} | {number} | " + " | ".join(cells) + " |")
        for pipeline, (end_to_end_ratios, sustained_ratios) in ratios.items():
            print(
                f"| {kind} | {pipeline} | median | | {statistics.median(end_to_end_ratios):.2f}x | "
                f"| {statistics.median(sustained_ratios):.2f}x |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--no-warm-up-queries",
        dest="warm_up_queries",
        action="store_false",
        help="skip the untimed whole query per pipeline before the timed rounds",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--brokers", default="broker_min,kafka", help="comma-separated: broker_min, kafka")
    parser.add_argument(
        "--pipelines",
        default=",".join(PIPELINES),
        help=f"comma-separated: {', '.join(PIPELINES + MIXED)} (the mixed ones swap one side for Spark's)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: 20,000 records, broker_min, kafkakit pipelines"
    )
    parser.add_argument(
        "--write-path",
        action="store_true",
        help="no Spark: time arrow_chunk + the sink's task writer on batches of up to 100,000 rows",
    )
    args = parser.parse_args()
    if args.smoke:
        args.records, args.batches, args.runs = 20_000, 2, 1
        args.brokers, args.pipelines = "broker_min", "kafkakit-eos,kafkakit"
        args.warm_up_queries = False
    if args.write_path:
        results = measure_write_path(args)
    else:
        results = measure(args)
        report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
