"""kafkakit's pytest plugin (``pip install "kafkakit[testing]"``; loaded through ``pytest11``).

Fixtures:

- ``kafka_broker`` (session): a broker for the whole session, broker_min in a
  child process by default (:class:`kafkakit.testing.KafkaBroker`: ``bootstrap_servers``,
  ``data_dir``, ``log_path``, faults ``kill()``, ``restart()``, ``pause()``, ``resume()``).
- ``kafka_topic`` (function): ``kafka_topic(partitions=1, config=None, name=None) -> str``
  creates a fresh topic; the test's topics are deleted after it.
- ``kafka_cluster`` (session unless ``--kafka-cluster-scope`` says otherwise): a
  multi-node cluster, broker_min's KRaft cluster (:class:`kafkakit.broker.LocalCluster`)
  as child processes by default (:class:`kafkakit.testing.KafkaCluster`:
  ``bootstrap_servers``, ``node_ids``, ``leader(topic, partition)``, node faults
  ``kill(n)``, ``stop(n)``, ``start(n)``, ``restart(n)``, ``pause(n)``, ``resume(n)``);
  with ``--kafka-bootstrap``, the cluster named there (no faults).
- ``kafka_cluster_topic`` (function): ``kafka_topic`` on ``kafka_cluster``, replicated
  to min(3, brokers) brokers by default.

Options (command line, then environment, then ini): ``--kafka-bootstrap HOST:PORT``
(``KAFKAKIT_TEST_BOOTSTRAP``, ini ``kafka_bootstrap``), ``--kafka-backend``
(``broker_min`` | ``testcontainers``, ini ``kafka_backend``), ``--kafka-broker-mode``
(``process`` | ``thread``, ini ``kafka_broker_mode``), ``--kafka-broker-config KEY=VALUE``
(ini ``kafka_broker_config``, one per line), ``--kafka-cluster-nodes N`` (ini
``kafka_cluster_nodes``, default 3), ``--kafka-cluster-config KEY=VALUE`` (ini
``kafka_cluster_config``), ``--kafka-cluster-scope`` (ini ``kafka_cluster_scope``,
default ``session``).

A failing test that uses ``kafka_broker`` gets a "kafka broker log" section with the
lines the broker logged while the test ran; one that uses ``kafka_cluster`` gets a
"kafka cluster node N log" section per node.

This module loads in every pytest session of anyone who installs kafkakit, so it
imports only pytest and the standard library; the brokers load when a fixture runs.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from kafkakit.testing.brokers import KafkaBroker
    from kafkakit.testing.cluster import KafkaCluster
    from kafkakit.testing.topics import TopicFactory

BOOTSTRAP_ENV = "KAFKAKIT_TEST_BOOTSTRAP"
BACKENDS = ("broker_min", "testcontainers")
MODES = ("process", "thread")
Scope = Literal["session", "package", "module", "class", "function"]
SCOPES: tuple[Scope, ...] = ("session", "package", "module", "class", "function")
DEFAULT_CLUSTER_NODES = 3
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
    cluster_nodes: int = DEFAULT_CLUSTER_NODES
    cluster_config: tuple[str, ...] = ()
    cluster_scope: Scope = "session"


@dataclass
class _State:
    settings: Settings
    #: brokers the plugin started and has not closed yet
    brokers: list[KafkaBroker] = field(default_factory=list)
    #: clusters the plugin started and has not closed yet
    clusters: list[KafkaCluster] = field(default_factory=list)


_STATE = pytest.StashKey[_State]()
_LOG_MARKS = pytest.StashKey[dict[int, int]]()
_NODE_LOG_MARKS = pytest.StashKey[dict[tuple[int, int], int]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "kafkakit", "kafkakit Kafka fixtures (kafka_broker, kafka_topic, kafka_cluster, kafka_cluster_topic)"
    )
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
    group.addoption(
        "--kafka-cluster-nodes",
        metavar="N",
        default=None,
        help=f"nodes of the broker_min cluster kafka_cluster starts (default {DEFAULT_CLUSTER_NODES})",
    )
    group.addoption(
        "--kafka-cluster-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every node of kafka_cluster, Kafka's name, e.g. min.insync.replicas=2 (repeatable)",
    )
    group.addoption(
        "--kafka-cluster-scope",
        choices=SCOPES,
        default=None,
        help="how long one kafka_cluster lives (default session)",
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
    parser.addini("kafka_cluster_nodes", f"nodes of kafka_cluster (default {DEFAULT_CLUSTER_NODES})", default="")
    parser.addini(
        "kafka_cluster_config", "settings for every kafka_cluster node, KEY=VALUE, one per line", type="linelist", default=[]
    )
    parser.addini("kafka_cluster_scope", "scope of kafka_cluster: session (default), package, module, class, function", default="")


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
    nodes_text = str(config.getoption("kafka_cluster_nodes") or ini("kafka_cluster_nodes") or DEFAULT_CLUSTER_NODES)
    if not nodes_text.strip().isdigit() or int(nodes_text) < 1:
        raise pytest.UsageError(f"kafka_cluster_nodes = {nodes_text!r}: expected a number of nodes, 1 or more")
    cluster_pairs = [str(p) for p in config.getini("kafka_cluster_config")] + list(
        config.getoption("kafka_cluster_config")
    )
    for pair in cluster_pairs:
        if "=" not in pair:
            raise pytest.UsageError(f"kafka cluster config {pair!r}: expected KEY=VALUE")
    scope_name = config.getoption("kafka_cluster_scope") or ini("kafka_cluster_scope") or "session"
    scope = next((s for s in SCOPES if s == scope_name), None)
    if scope is None:
        raise pytest.UsageError(f"kafka_cluster_scope = {scope_name!r}: expected one of {', '.join(SCOPES)}")
    return Settings(
        bootstrap or None, bootstrap_source, backend, mode, tuple(pairs), image,
        int(nodes_text), tuple(cluster_pairs), scope,
    )  # fmt: skip


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


def _cluster_scope(fixture_name: str, config: pytest.Config) -> Scope:
    state = config.stash.get(_STATE, None)
    return (state.settings if state is not None else _resolve(config)).cluster_scope


def _cluster_settings(pairs: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as LocalCluster's config, each checked as a broker setting."""
    from kafkakit.broker.config import BrokerConfig
    from kafkakit.errors import KafkaConfigError

    settings = {key.strip(): value for key, _, value in (pair.partition("=") for pair in pairs)}
    try:
        # The cluster supplies the quorum settings; check the others before any node starts.
        BrokerConfig.from_strings({"controller.quorum.voters": "1@127.0.0.1:1", "node.id": "1", "cluster.id": "check", **settings})
    except KafkaConfigError as exc:
        raise pytest.UsageError(f"kafka cluster config: {exc}") from None
    return settings


@pytest.fixture(scope=_cluster_scope)
def kafka_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    """A multi-node Kafka cluster (see :class:`kafkakit.testing.KafkaCluster`).

    broker_min's KRaft cluster (``kafka_cluster_nodes`` combined broker+controller
    child processes, node ids 1..N) unless ``--kafka-bootstrap`` names a running
    cluster. A test that leaves nodes killed, stopped or paused gets them started or
    resumed afterwards (and waits until they are back in the cluster).
    """
    from kafkakit.testing import cluster as clusters

    state = _state(request.config)
    settings = state.settings
    running: KafkaCluster
    if settings.bootstrap is not None:
        external = clusters.ExternalCluster(settings.bootstrap)
        external.check_reachable()
        running = external
    else:
        local = clusters.ClusterProcesses(
            tmp_path_factory.mktemp("kafka_cluster"),
            nodes=settings.cluster_nodes,
            config=_cluster_settings(settings.cluster_config),
        )
        local.start_cluster()
        running = local
    state.clusters.append(running)
    try:
        yield running
    finally:
        state.clusters.remove(running)
        running.close()


@pytest.fixture
def kafka_cluster_topic(request: pytest.FixtureRequest, kafka_cluster: Any) -> Iterator[TopicFactory]:
    """``kafka_topic`` for ``kafka_cluster``: ``kafka_cluster_topic(partitions=1, config=None,
    name=None, replication_factor=...) -> str``, replicated to min(3, brokers) brokers unless
    ``replication_factor`` says otherwise; the test's topics are deleted after it."""
    from kafkakit.testing.topics import TopicFactory, topic_prefix

    factory = TopicFactory(
        str(kafka_cluster.bootstrap_servers),
        prefix=topic_prefix(request.node.name),
        replication_factor=min(3, len(kafka_cluster.node_ids)),
    )
    yield factory
    factory.delete_created()


# --------------------------------------------------------------------------- hooks


def _uses_broker(item: pytest.Item) -> bool:
    return "kafka_broker" in getattr(item, "fixturenames", ())


def _uses_cluster(item: pytest.Item) -> bool:
    return "kafka_cluster" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Where each running broker's log stands as the test starts; a broker started
    # during this test's setup has no mark and is shown from its first line.
    if _uses_broker(item):
        item.stash[_LOG_MARKS] = {id(b): b.log_size() for b in _state(item.config).brokers}
    if _uses_cluster(item):
        item.stash[_NODE_LOG_MARKS] = {
            (id(c), n): c.log_size(n) for c in _state(item.config).clusters if c.mode == "process" for n in c.node_ids
        }


def _tail(lines: list[str], path: object) -> list[str]:
    if len(lines) > REPORT_LOG_LINES:
        return [f"... ({len(lines) - REPORT_LOG_LINES} earlier lines in {path})"] + lines[-REPORT_LOG_LINES:]
    return lines


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
            title = f"{_SECTION} ({broker.mode}, {broker.bootstrap_servers}) {report.when}"
            report.sections.append((title, "\n".join(_tail(lines, broker.log_path))))
    if report.failed and _uses_cluster(item):
        node_marks = item.stash.get(_NODE_LOG_MARKS, {})
        for cluster in _state(item.config).clusters:
            if cluster.mode != "process":
                continue  # an external cluster: its logs are not ours to read
            for node_id in cluster.node_ids:
                path = cluster.log_path(node_id)
                lines = cluster.log_text(node_id, node_marks.get((id(cluster), node_id), 0)).splitlines()
                if not lines:
                    lines = [f"(node {node_id} logged nothing while this test ran; its whole log: {path})"]
                title = f"kafka cluster node {node_id} log ({cluster.address(node_id)}) {report.when}"
                report.sections.append((title, "\n".join(_tail(lines, path))))
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Before the test's own fixtures are torn down (they may still talk to the
    # broker), bring back a broker the test killed or paused, for the tests after it.
    if _uses_broker(item):
        for broker in _state(item.config).brokers:
            broker.ensure_running()
    if _uses_cluster(item):
        for cluster in _state(item.config).clusters:
            cluster.ensure_running()
