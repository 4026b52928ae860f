"""Fixtures that give every test a running broker of each kind the session asks for.

``KAFKAKIT_TEST_BROKERS`` (comma list, default ``broker_min,kafka``) picks the kinds
the ``broker`` fixture is parametrized over:

- ``broker_min``: kafkakit's own broker, in this process on a background thread.
- ``kafka``: Apache Kafka (KRaft, single node) from jars Maven fetches into
  ``${KAFKAKIT_CACHE:-~/.cache/kafkakit}``. Skipped, with the reason shown, only
  when java or mvn is missing; a failed fetch or start is an error.
- ``testcontainers``: Apache Kafka in Docker; skipped unless ``docker info`` works.

Each broker starts once per session, whatever order the tests run in.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Makes `tests.brokers` importable however pytest is started (`pytest` or `python -m pytest`).
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.brokers import (  # noqa: E402
    BrokerMinProcess,
    BrokerMinServer,
    KafkaServer,
    RunningBroker,
    TestcontainersKafka,
    compile_kafkakit_bytecode,
    docker_unavailable_reason,
    kafka_version,
    missing_kafka_tools,
    new_topic_name,
    requested_broker_kinds,
)
from tests.security_env import Pki, SecureBroker, SecureBrokerMin, SecureKafkaServer, pki_for_session  # noqa: E402

try:
    BROKER_KINDS = requested_broker_kinds(os.environ.get("KAFKAKIT_TEST_BROKERS"))
except ValueError as exc:
    raise pytest.UsageError(str(exc)) from exc

_FIXTURE_FOR_KIND = {
    "broker_min": "broker_min",
    "kafka": "kafka_broker",
    "testcontainers": "testcontainers_broker",
}
_startup_notes: list[str] = []
SECURE_KINDS = [kind for kind in BROKER_KINDS if kind in ("broker_min", "kafka")]


@pytest.fixture(scope="session")
def broker_min(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerMinServer]:
    """kafkakit's broker for the whole session (in-process; ``.data_dir`` is its storage).

    Available whatever KAFKAKIT_TEST_BROKERS says: broker-specific tests use it directly.
    """
    # KIP-848 groups as on the Kafka fixture (tests/brokers.py): 500 ms heartbeats, 6 s sessions.
    # No time-based retention, as on the Kafka fixture: tests write records with CreateTimes
    # years old, which the 5-minute retention check would delete between a write and a read.
    server = BrokerMinServer(
        tmp_path_factory.mktemp("broker_min"),
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_session_timeout_ms=6000,
        log_retention_ms=-1,
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    """Apache Kafka for the whole session; its log stays in pytest's temp dir."""
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    server = KafkaServer(tmp_path_factory.mktemp("kafka"))
    server.start()  # BrokerSetupError propagates: a failed fetch or start is an error, not a skip
    _startup_notes.append(
        f"Apache Kafka {kafka_version()} on {server.bootstrap_servers} started in "
        f"{server.startup_seconds:.1f}s (log: {server.log_path})"
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pki]:
    """A CA, broker and client certificates for this session (tests/security_env.py)."""
    yield from pki_for_session(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def secure_broker_min(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBrokerMin]:
    """broker_min with TLS, SASL and the authorizer on four listeners."""
    server = SecureBrokerMin(tmp_path_factory.mktemp("secure_broker_min"), pki)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureKafkaServer]:
    """Apache Kafka with the same security settings as :func:`secure_broker_min`."""
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    server = SecureKafkaServer(tmp_path_factory.mktemp("secure_kafka"), pki)
    server.start()
    _startup_notes.append(f"secured Apache Kafka started in {server.startup_seconds:.1f}s (log: {server.log_path})")
    yield server
    server.stop()


@pytest.fixture(scope="session", params=SECURE_KINDS)
def secure_broker(request: pytest.FixtureRequest) -> SecureBroker:
    """A secured broker of each requested kind: ``.listener(name)``, ``.pki``, ``.kind``."""
    fixture = "secure_broker_min" if request.param == "broker_min" else "secure_kafka"
    server: SecureBroker = request.getfixturevalue(fixture)
    return server


@pytest.fixture(scope="session")
def testcontainers_broker() -> Iterator[TestcontainersKafka]:
    """Apache Kafka in Docker via testcontainers, where a Docker engine runs."""
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = TestcontainersKafka()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session", params=BROKER_KINDS)
def broker(request: pytest.FixtureRequest) -> RunningBroker:
    """A running broker of each requested kind: ``.bootstrap_servers``, ``.kind``.

    The broker behind each kind is its own session fixture, so pytest may tear this
    parametrized fixture down and up again without restarting a JVM.
    """
    kind: str = request.param
    server: RunningBroker = request.getfixturevalue(_FIXTURE_FOR_KIND[kind])
    return server


@pytest.fixture
def broker_min_process(tmp_path: Path) -> Iterator[BrokerMinProcess]:
    """kafkakit's broker as a child process for this test only: ``kill()``, ``restart()``."""
    process = BrokerMinProcess(tmp_path / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (named after it, for reading broker logs)."""
    return new_topic_name(_topic_prefix(request.node.name))


@pytest.fixture
def topic_factory(request: pytest.FixtureRequest) -> Callable[[], str]:
    """Call it for as many unique topic names as a test needs."""
    prefix = _topic_prefix(request.node.name)
    return lambda: new_topic_name(prefix)


def _topic_prefix(test_name: str) -> str:
    # Topic names allow [a-zA-Z0-9._-]; keep them short enough to read.
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", test_name).strip("-")[:40] or "t"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for note in _startup_notes:
        terminalreporter.write_line(note)


def pytest_configure(config: pytest.Config) -> None:
    """Write kafkakit's bytecode once, before any worker or subprocess starts (see
    :func:`tests.brokers.compile_kafkakit_bytecode`)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    compile_kafkakit_bytecode()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-long",
        action="store_true",
        default=False,
        help="tests/test_chaos_scenarios.py: repeat each fault and run every scenario with confluent-kafka "
        "and aiokafka too (minutes; run before calling a resilience change done)",
    )


#: Test files that take minutes (Spark start-ups, guide pages, chaos faults, clusters), slowest
#: first. The suite runs them first so that, split over workers (pytest-xdist, --dist loadfile),
#: no worker is left with a long file at the end while the others are idle.
SLOW_FILES_FIRST = (
    "tests/spark/test_exactly_once_pipeline.py",
    "tests/test_docs_guides.py",
    "tests/test_chaos_scenarios.py",
    "tests/test_examples.py",
    "tests/spark/test_sink.py",
    "tests/test_cli.py",
    "tests/test_cluster_faults.py",
    "tests/test_cluster_mode.py",
    "tests/test_pytest_plugin.py",
    "tests/spark/test_source.py",
    "tests/test_kafka_cluster.py",
    "tests/test_broker_min_cluster.py",
    "tests/test_share_consumer.py",
    "tests/test_broker_share_groups.py",
    "tests/test_consumer_group_protocol.py",
    "tests/test_cli_groups.py",
    "tests/test_cluster_security.py",
    "tests/test_broker_consumer_groups.py",
    "tests/spark/test_spark_bench_smoke.py",
    "tests/test_benchmark_scale_smoke.py",
    "tests/test_broker_security.py",
    "tests/test_static_checks.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow files first (see :data:`SLOW_FILES_FIRST`); otherwise pytest's own order is kept."""
    rank = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}

    def key(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(rank))

    items.sort(key=key)  # stable: the order within a file (and among the rest) is pytest's
