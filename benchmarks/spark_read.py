"""Spark batch read throughput: kafkakit.spark against Spark's built-in Kafka connector.

Both readers run in the same Spark session (local[2]) against the same broker
and topic, in the same run; the topic is filled once with kafkakit's bulk
producer.  Each read is ``spark.read.format(...).load()`` of the whole topic
followed by an aggregate over every record (count, total value length, max
offset), which makes both sources materialise every row.

Spark's connector (``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark
version>``) is fetched with Maven from benchmarks/spark-kafka/pom.xml into
``${KAFKAKIT_CACHE:-~/.cache/kafkakit}/spark-kafka-<version>`` and handed to
Spark with ``spark.jars``.

    python benchmarks/spark_read.py                        # 10,000,000 x 100 B on Apache Kafka, both readers
    python benchmarks/spark_read.py --smoke                # seconds: broker_min, kafkakit only
    python benchmarks/spark_read.py --records 1000000 --brokers broker_min,kafka

Prints records/s per reader and the ratio kafkakit / Spark connector.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POM = ROOT / "benchmarks" / "spark-kafka" / "pom.xml"
TOPIC = "spark-read-bench"


#: Connector versions to try after the installed pyspark's own (Maven Central may lag a release).
CONNECTOR_FALLBACKS = ("4.2.0", "4.1.1", "4.0.1")
#: The connector's runtime jars Spark does not ship itself.
_NEEDED = ("spark-sql-kafka-0-10", "kafka-clients", "commons-pool2")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def connector_jars(spark_version: str) -> tuple[str, list[Path]]:
    """(connector version, jars to pass with spark.jars), fetched with Maven on first use."""
    candidates = [spark_version] + [
        v for v in CONNECTOR_FALLBACKS if _version_key(v) < _version_key(spark_version)
    ]
    errors = []
    for version in candidates:
        try:
            jars = _fetch_connector(version)
        except RuntimeError as exc:
            errors.append(str(exc))
            continue
        return version, [j for j in jars if j.name.startswith(_NEEDED)] + [_standin_jar()]
    raise SystemExit("cannot fetch Spark's Kafka connector:\n" + "\n".join(errors))


def _fetch_connector(version: str) -> list[Path]:
    from tests.brokers import cache_root

    target = cache_root() / f"spark-kafka-{version}"
    marker = target / ".fetched"
    if not marker.is_file():
        if shutil.which("mvn") is None:
            raise SystemExit("mvn is needed to fetch Spark's Kafka connector (or pass --readers kafkakit)")
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        command = [
            "mvn", "-q", "-B", "-s", str(POM.with_name("settings.xml")), "-f", str(POM),
            "dependency:copy-dependencies", "-DincludeScope=runtime",
            f"-Dspark.version={version}", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        marker.write_text(version + "\n")
    jars = sorted(target.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka-0-10") for j in jars):
        raise RuntimeError(f"no spark-sql-kafka-0-10 jar in {target}")
    return jars


def _standin_jar() -> Path:
    """The token-provider stand-in (see benchmarks/spark-kafka/pom.xml), compiled against pyspark's jars."""
    import pyspark

    from tests.brokers import cache_root

    sources = sorted((POM.parent / "token-provider-standin").rglob("*.java"))
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in sources) + pyspark.__version__.encode()).hexdigest()[:12]
    jar = cache_root() / f"spark-kafka-token-standin-{digest}.jar"
    if jar.is_file():
        return jar
    if shutil.which("javac") is None or shutil.which("jar") is None:
        raise SystemExit("javac and jar (a JDK) are needed to build the connector's token-provider stand-in")
    spark_jars = Path(pyspark.__file__).parent / "jars"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            ["javac", "-nowarn", "-cp", f"{spark_jars}/*", "-d", tmp, *map(str, sources)], check=True, timeout=300
        )
        jar.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["jar", "cf", str(jar), "-C", tmp, "."], check=True, timeout=300)
    return jar


def start_broker(kind: str, workdir: Path) -> Any:
    import tests.brokers as brokers

    server: Any
    if kind == "broker_min":
        server = brokers.BrokerMinProcess(workdir / "broker_min")
    else:
        server = brokers.KafkaServer(workdir / "kafka")
    server.start()
    return server


async def fill_topic(bootstrap: str, records: int, size: int, partitions: int) -> float:
    """Create the topic and write ``records`` values of ``size`` bytes spread over its partitions."""
    from kafkakit import Admin, NewTopic, Producer

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])
    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    chunk = 10000
    values = [value] * chunk
    started = time.perf_counter()
    async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=1 << 20) as producer:
        futures = []
        for i in range(0, records, chunk):
            futures.append(
                await producer.send_batch(TOPIC, values[: min(chunk, records - i)], partition=(i // chunk) % partitions)
            )
        await asyncio.gather(*futures)
    return time.perf_counter() - started


def read_once(spark: Any, reader: str, bootstrap: str) -> tuple[float, int, int]:
    """One full read: (seconds, records, total value bytes)."""
    from pyspark.sql import functions as F  # noqa: N812

    source = "kafkakit" if reader == "kafkakit" else "kafka"
    builder = (
        spark.read.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
    )
    if reader == "spark-8m":  # the JVM connector with kafkakit's default per-partition fetch size
        builder = builder.option("kafka.max.partition.fetch.bytes", str(8 << 20))
    df = builder.load()
    started = time.perf_counter()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"), F.max("offset")).collect()[0]
    return time.perf_counter() - started, int(row["n"]), int(row["bytes"] or 0)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import pyspark
    from kafkakit.spark import local_session

    import tests.brokers as brokers

    brokers.compile_kafkakit_bytecode()  # as an installed kafkakit has it

    readers = args.readers.split(",")
    conf = {"spark.driver.memory": "2g"}
    results: dict[str, Any] = {"args": vars(args), "pyspark": pyspark.__version__, "brokers": {}}
    if any(r.startswith("spark") for r in readers):
        version, jars = connector_jars(pyspark.__version__)
        conf["spark.jars"] = ",".join(str(j) for j in jars)
        results["connector"] = version
        print(f"Spark Kafka connector {version}: {', '.join(j.name for j in jars)}", flush=True)
    spark = local_session("kafkakit-spark-read-bench", args.master, **conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="kafkakit-spark-bench-") as tmp:
            for kind in args.brokers.split(","):
                server = start_broker(kind, Path(tmp))
                try:
                    results["brokers"][kind] = measure_broker(spark, server.bootstrap_servers, readers, args)
                finally:
                    server.stop()
    finally:
        spark.stop()
    return results


def measure_broker(spark: Any, bootstrap: str, readers: list[str], args: argparse.Namespace) -> dict[str, Any]:
    produce_s = asyncio.run(fill_topic(bootstrap, args.records, args.size, args.partitions))
    print(f"  produced {args.records:,} x {args.size} B in {produce_s:.1f}s", flush=True)
    out: dict[str, Any] = {"produce_seconds": produce_s, "readers": {}}
    timings: dict[str, list[float]] = {reader: [] for reader in readers}
    # Runs alternate between the readers, so a change in machine load hits both alike.
    for run in range(args.runs):
        for reader in readers:
            seconds, count, total = read_once(spark, reader, bootstrap)
            if count != args.records or total != args.records * args.size:
                raise SystemExit(f"{reader} read {count} records / {total} bytes, expected {args.records}")
            timings[reader].append(seconds)
            print(f"  {reader:9} run {run + 1}: {seconds:7.2f}s  {args.records / seconds:12,.0f} records/s", flush=True)
    for reader, seconds_list in timings.items():
        out["readers"][reader] = {"seconds": seconds_list, "records_per_s": args.records / min(seconds_list)}
    rates = out["readers"]
    for peer in ("spark", "spark-8m"):
        if "kafkakit" in rates and peer in rates:
            out["ratio" if peer == "spark" else "ratio_8m"] = (
                rates["kafkakit"]["records_per_s"] / rates[peer]["records_per_s"]
            )
    return out


_NAMES = {
    "kafkakit": "kafkakit.spark",
    "spark": "Spark Kafka connector (JVM)",
    "spark-8m": "Spark Kafka connector (JVM), 8 MiB fetches",
}


def report(results: dict[str, Any]) -> None:
    args = results["args"]
    print(f"\nSpark batch read of {args['records']:,} x {args['size']} B records, {args['partitions']} partitions, "
          f"{args['master']}, pyspark {results['pyspark']}, connector {results.get('connector', '-')}, "
          f"best of {args['runs']}")
    for kind, data in results["brokers"].items():
        for reader, r in data["readers"].items():
            print(f"  {kind:10} {_NAMES[reader]:42} {r['records_per_s']:12,.0f} records/s")
        if "ratio" in data:
            print(f"  {kind:10} ratio kafkakit / JVM connector: {data['ratio']:.2f}x")
        if "ratio_8m" in data:
            print(f"  {kind:10} ratio kafkakit / JVM connector (8 MiB fetches): {data['ratio_8m']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--brokers", default="kafka", help="comma-separated: kafka, broker_min")
    parser.add_argument("--readers", default="kafkakit,spark", help="comma-separated: kafkakit, spark, spark-8m")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 20,000 records, broker_min, kafkakit")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.runs, args.brokers, args.readers = 20_000, 1, "broker_min", "kafkakit"
    results = measure(args)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
