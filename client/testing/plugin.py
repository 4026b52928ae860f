"""kafkakit's pytest plugin (``pip install "kafkakit[testing]"``; loaded through ``pytest11``).

Fixtures:

- ``kafka_broker`` (session): a broker for the whole session, broker_min in a
  child process by default (:class:`kafkakit.testing.KafkaBroker`: ``bootstrap_servers``,
  ``data_dir``, ``log_path``, faults ``kill()``, ``restart()``, ``pause()``, ``resume()``).
- ``kafka_topic`` (function): ``kafka_topic(partitions=1, config=None, name=None) -> str``
  creates a fresh topic; the test's topics are deleted after it.
- ``kafka_cluster`` (session): a multi-node cluster; only with ``--kafka-bootstrap`` for now.

Options (command line, then environment, then ini): ``--kafka-bootstrap HOST:PORT``
(``KAFKAKIT_TEST_BOOTSTRAP``, ini ``kafka_bootstrap``), ``--kafka-backend``
(``broker_min`` | ``testcontainers``, ini ``kafka_backend``), ``--kafka-broker-mode``
(``process`` | ``thread``, ini ``kafka_broker_mode``), ``--kafka-broker-config KEY=VALUE``
(ini ``kafka_broker_config``, one per line).

A failing test that uses ``kafka_broker`` gets a "kafka broker log" section with the
lines the broker logged while the test ran.

This module loads in every pytest session of anyone who installs kafkakit, so it
imports only pytest and the standard library; the brokers load when a fixture runs.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kafkakit.testing.brokers import KafkaBroker
    from kafkakit.testing.topics import TopicFactory

BOOTSTRAP_ENV = "KAFKAKIT_TEST_BOOTSTRAP"
BACKENDS = ("broker_min", "testcontainers")
MODES = ("process", "thread")
CLUSTER_SKIP_REASON = (
    "broker_min cluster mode is not built yet (issue 13); "
    "use --kafka-bootstrap to run against a real multi-node cluster"
)
#: The most lines of broker log a failing test's report shows.
REPORT_LOG_LINES = 200
_SECTION = "kafka broker log"


@dataclass(frozen=True)
class Settings:
    """The plugin's options after command line, environment and ini are combined."""

    bootstrap: str | None
    bootstrap_source: str
    backend: str
    mode: str
    broker_config: tuple[str, ...]
    container_image: str | None


@dataclass
class _State:
    settings: Settings
    #: brokers the plugin started and has not closed yet
    brokers: list[KafkaBroker] = field(default_factory=list)


_STATE = pytest.StashKey[_State]()
_LOG_MARKS = pytest.StashKey[dict[int, int]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kafkakit", "kafkakit Kafka fixtures (kafka_broker, kafka_topic, kafka_cluster)")
    group.addoption(
        "--kafka-bootstrap",
        metavar="HOST:PORT",
        default=None,
        help=f"use this running Kafka instead of starting one (also ${BOOTSTRAP_ENV}); faults are then unavailable",
    )
    group.addoption(
        "--kafka-backend",
        choices=BACKENDS,
        default=None,
        help="what kafka_broker starts: broker_min (default) or Apache Kafka in Docker through testcontainers",
    )
    group.addoption(
        "--kafka-broker-mode",
        choices=MODES,
        default=None,
        help="broker_min as a child process (default; takes faults) or on a thread of the test process",
    )
    group.addoption(
        "--kafka-broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker_min setting such as num.partitions=3 (repeatable)",
    )
    parser.addini(
        "kafka_bootstrap", "HOST:PORT of a running Kafka to use instead of starting one", default=""
    )
    parser.addini("kafka_backend", "broker_min (default) or testcontainers", default="")
    parser.addini("kafka_broker_mode", "process (default) or thread", default="")
    parser.addini(
        "kafka_broker_config", "broker_min settings, KEY=VALUE, one per line", type="linelist", default=[]
    )
    parser.addini("kafka_testcontainers_image", "the Kafka image for the testcontainers backend", default="")


def _resolve(config: pytest.Config) -> Settings:
    def ini(name: str) -> str:
        return str(config.getini(name)).strip()

    bootstrap_source = "--kafka-bootstrap"
    bootstrap = config.getoption("kafka_bootstrap")
    if not bootstrap and os.environ.get(BOOTSTRAP_ENV, "").strip():
        bootstrap, bootstrap_source = os.environ[BOOTSTRAP_ENV].strip(), BOOTSTRAP_ENV
    if not bootstrap and ini("kafka_bootstrap"):
        bootstrap, bootstrap_source = ini("kafka_bootstrap"), "ini kafka_bootstrap"
    backend = config.getoption("kafka_backend") or ini("kafka_backend") or "broker_min"
    mode = config.getoption("kafka_broker_mode") or ini("kafka_broker_mode") or "process"
    if backend not in BACKENDS:
        raise pytest.UsageError(f"kafka_backend = {backend!r}: expected one of {', '.join(BACKENDS)}")
    if mode not in MODES:
        raise pytest.UsageError(f"kafka_broker_mode = {mode!r}: expected one of {', '.join(MODES)}")
    pairs = [str(p) for p in config.getini("kafka_broker_config")] + list(
        config.getoption("kafka_broker_config")
    )
    for pair in pairs:
        if "=" not in pair:
            raise pytest.UsageError(f"kafka broker config {pair!r}: expected KEY=VALUE")
    image = ini("kafka_testcontainers_image") or os.environ.get("KAFKAKIT_TESTCONTAINERS_IMAGE") or None
    return Settings(bootstrap or None, bootstrap_source, backend, mode, tuple(pairs), image)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STATE] = _State(_resolve(config))


def _state(config: pytest.Config) -> _State:
    return config.stash[_STATE]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    """A Kafka broker for the whole session (see :class:`kafkakit.testing.KafkaBroker`).

    broker_min in a child process unless ``--kafka-broker-mode=thread``,
    ``--kafka-backend=testcontainers`` or ``--kafka-bootstrap`` say otherwise. A
    test that leaves it killed or paused gets it restarted or resumed afterwards.
    """
    from kafkakit.testing import brokers

    state = _state(request.config)
    settings = state.settings
    broker: KafkaBroker
    if settings.bootstrap is not None:
        external = brokers.ExternalBroker(settings.bootstrap)
        external.check_reachable()
        broker = external
    elif settings.backend == "testcontainers":
        reason = brokers.docker_unavailable_reason()
        if reason is not None:
            pytest.skip(reason)
        container = brokers.ContainerBroker(settings.container_image or brokers.DEFAULT_CONTAINER_IMAGE)
        container.start()
        broker = container
    else:
        work = tmp_path_factory.mktemp("kafka_broker")
        log_path = work / "broker.log"
        if settings.mode == "thread":
            in_thread = brokers.BrokerThread(work / "data", log_path, settings=settings.broker_config)
            in_thread.start()
            broker = in_thread
        else:
            child = brokers.BrokerProcess(work / "data", log_path, settings=settings.broker_config)
            child.start()
            broker = child
    state.brokers.append(broker)
    try:
        yield broker
    finally:
        state.brokers.remove(broker)
        broker.close()


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest, kafka_broker: Any) -> Iterator[TopicFactory]:
    """``kafka_topic(partitions=1, config=None, name=None) -> str``: a fresh topic per call.

    Each topic is created through kafkakit's Admin and usable (every partition
    has a leader) when the call returns; the test's topics are deleted after it.
    """
    from kafkakit.testing.topics import TopicFactory, topic_prefix

    factory = TopicFactory(str(kafka_broker.bootstrap_servers), prefix=topic_prefix(request.node.name))
    yield factory
    factory.delete_created()


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> KafkaBroker:
    """A multi-node Kafka cluster: the one ``--kafka-bootstrap`` names (skipped without it)."""
    settings = _state(request.config).settings
    if settings.bootstrap is None:
        pytest.skip(CLUSTER_SKIP_REASON)
    from kafkakit.testing.brokers import ExternalBroker

    cluster = ExternalBroker(settings.bootstrap)
    cluster.check_reachable()
    return cluster


# --------------------------------------------------------------------------- hooks


def _uses_broker(item: pytest.Item) -> bool:
    return "kafka_broker" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Where each running broker's log stands as the test starts; a broker started
    # during this test's setup has no mark and is shown from its first line.
    if _uses_broker(item):
        item.stash[_LOG_MARKS] = {id(b): b.log_size() for b in _state(item.config).brokers}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.failed and _uses_broker(item):
        marks = item.stash.get(_LOG_MARKS, {})
        for broker in _state(item.config).brokers:
            if broker.log_path is None and broker.mode != "testcontainers":
                continue  # an external broker: its log is not ours to read
            lines = broker.log_text(marks.get(id(broker), 0)).splitlines()
            if not lines:
                lines = [f"(the broker logged nothing while this test ran; its whole log: {broker.log_path})"]
            if len(lines) > REPORT_LOG_LINES:
                lines = [f"... ({len(lines) - REPORT_LOG_LINES} earlier lines in {broker.log_path})"] + lines[
                    -REPORT_LOG_LINES:
                ]
            title = f"{_SECTION} ({broker.mode}, {broker.bootstrap_servers}) {report.when}"
            report.sections.append((title, "\n".join(lines)))
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Before the test's own fixtures are torn down (they may still talk to the
    # broker), bring back a broker the test killed or paused, for the tests after it.
    if _uses_broker(item):
        for broker in _state(item.config).brokers:
            broker.ensure_running()
