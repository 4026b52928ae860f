"""kafkakit's pytest plugin (kafkakit.testing), as a user's pytest session sees it.

Each test writes test files into a pytester directory and runs pytest on them in a
subprocess, so the plugin loads from its ``pytest11`` entry point exactly as it does
for anyone who installs ``kafkakit[testing]``; the inner tests talk to real brokers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafkakit import Admin
from kafkakit.testing.brokers import docker_unavailable_reason

from tests.brokers import BrokerMinServer

pytest_plugins = ["pytester"]

# Shared by the inner test files: describe a topic with kafkakit's Admin.
HELPERS = """
import asyncio
import time

import pytest
from kafkakit import Admin, Consumer, KafkaTimeoutError, Producer, TopicPartition
from kafkakit.testing import BrokerFaultError


async def _describe(bootstrap, topic):
    async with Admin(bootstrap_servers=bootstrap) as admin:
        (description,) = await admin.describe_topics([topic])
        return len(description.partitions), await admin.describe_configs(topic)


def describe(bootstrap, topic):
    return asyncio.run(_describe(bootstrap, topic))


def topics(bootstrap):
    async def run():
        async with Admin(bootstrap_servers=bootstrap) as admin:
            return await admin.list_topics()
    return asyncio.run(run())


def produce(bootstrap, topic, count):
    async def run():
        async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            futures = [await producer.send(topic, value=b"%d" % i) for i in range(count)]
            await asyncio.gather(*futures)
    asyncio.run(run())


def consume(bootstrap, topic, count):
    async def run():
        values = []
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            deadline = time.monotonic() + 20
            while len(values) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value for r in records]
        return values
    return asyncio.run(run())
"""


def _section(output: str, when: str = "call") -> str:
    """The body of the "kafka broker log ... <when>" report section in pytest's output."""
    match = re.search(rf"^-+ kafka broker log \(.*\) {when} -+$\n(.*?)(?=^[-=_]{{5,}})", output, re.M | re.S)
    assert match is not None, f"no kafka broker log section for {when} in:\n{output}"
    return match.group(1)


def test_process_mode_topics_faults_and_the_failure_log(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        helpers=HELPERS,
        test_inner="""
from helpers import *

seen = {}


def test_broker_is_a_child_process(kafka_broker):
    assert kafka_broker.mode == "process"
    assert kafka_broker.data_dir.is_dir() and kafka_broker.pid is not None
    assert "kafkakit broker listening on " + kafka_broker.bootstrap_servers in kafka_broker.log_path.read_text()


def test_topics_have_the_partitions_and_configs_asked_for(kafka_broker, kafka_topic):
    compacted = kafka_topic(partitions=3, config={"cleanup.policy": "compact", "retention.ms": 60000})
    partitions, configs = describe(kafka_broker.bootstrap_servers, compacted)
    assert partitions == 3
    assert (configs["cleanup.policy"], configs["retention.ms"]) == ("compact", "60000")
    plain, named = kafka_topic(), kafka_topic(name="orders-explicit")
    assert len({compacted, plain, named}) == 3 and named == "orders-explicit"
    assert compacted.startswith("test_topics_have_the_partitions")
    seen["topics"] = [compacted, plain, named]


def test_topics_are_deleted_after_their_test(kafka_broker):
    assert seen["topics"] and not set(seen["topics"]) & topics(kafka_broker.bootstrap_servers)


def test_kill_and_restart_keep_acknowledged_data(kafka_broker, kafka_topic):
    topic, address = kafka_topic(), kafka_broker.bootstrap_servers
    produce(address, topic, 300)
    kafka_broker.kill()
    assert not kafka_broker.is_running()
    kafka_broker.restart()
    assert kafka_broker.bootstrap_servers == address
    assert consume(address, topic, 300) == [b"%d" % i for i in range(300)]


def test_pause_makes_requests_time_out_and_resume_recovers(kafka_broker, kafka_topic):
    topic = kafka_topic()

    async def run():
        async with Admin(bootstrap_servers=kafka_broker.bootstrap_servers, request_timeout_ms=800) as admin:
            kafka_broker.pause()
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError):
                await admin.describe_topics([topic])
            assert time.monotonic() - started >= 0.7
            kafka_broker.resume()
            (description,) = await admin.describe_topics([topic])
            assert description.name == topic

    asyncio.run(run())


def test_leaves_the_broker_killed(kafka_broker):
    kafka_broker.kill()


def test_next_test_gets_it_back(kafka_broker, kafka_topic):
    assert kafka_broker.is_running()
    produce(kafka_broker.bootstrap_servers, kafka_topic(), 1)


def test_leaves_the_broker_paused(kafka_broker):
    kafka_broker.pause()


def test_fails_and_shows_the_broker_log(kafka_broker, kafka_topic):
    assert kafka_broker.is_running()
    kafka_topic(name="topic-made-by-the-failing-test")
    assert False, "deliberate failure"
""",
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=8, failed=1)
    section = _section(result.stdout.str())
    # Only what the broker logged while the failing test ran: its topic, not the
    # startups of the earlier tests.
    assert "created topic topic-made-by-the-failing-test" in section
    assert "start #1:" not in section and "orders-explicit" not in section


def test_thread_mode_from_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkafka_broker_mode = thread\nkafka_broker_config =\n    num.partitions=2\n")
    pytester.makepyfile(
        helpers=HELPERS,
        test_inner="""
from helpers import *


def test_fails_first_and_shows_the_broker_log(kafka_broker, kafka_topic):
    kafka_topic(name="thread-mode-topic")
    assert False, "deliberate failure"


def test_broker_runs_in_a_thread_with_the_ini_settings(kafka_broker, kafka_topic):
    assert kafka_broker.mode == "thread" and kafka_broker.data_dir.is_dir()
    topic = kafka_topic(partitions=-1)  # the broker's num.partitions
    assert describe(kafka_broker.bootstrap_servers, topic)[0] == 2
    produce(kafka_broker.bootstrap_servers, topic, 5)


@pytest.mark.parametrize("fault", ["kill", "restart", "pause", "resume"])
def test_faults_say_to_use_process_mode(kafka_broker, fault):
    with pytest.raises(BrokerFaultError, match="--kafka-broker-mode=process"):
        getattr(kafka_broker, fault)()
""",
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=5, failed=1)
    section = _section(result.stdout.str())
    assert "listening on" in section and "in a thread" in section
    assert "created topic thread-mode-topic with 1 partition(s)" in section


@pytest.fixture
def second_broker(tmp_path: Path) -> Iterator[BrokerMinServer]:
    server = BrokerMinServer(tmp_path / "external")
    server.start()
    yield server
    server.stop()


EXTERNAL_TESTS = """
from helpers import *


def test_uses_the_external_broker(kafka_broker, kafka_topic, kafka_cluster):
    assert kafka_broker.mode == "external" and kafka_broker.data_dir is None
    assert kafka_broker.bootstrap_servers == kafka_cluster.bootstrap_servers == "{address}"
    topic = kafka_topic(partitions=2)
    assert describe("{address}", topic)[0] == 2
    for fault in ("kill", "restart", "pause", "resume"):
        with pytest.raises(BrokerFaultError, match="not supported for an external broker"):
            getattr(kafka_broker, fault)()


def test_kafka_cluster_is_the_external_cluster(kafka_cluster, kafka_cluster_topic):
    assert kafka_cluster.mode == "external" and kafka_cluster.node_ids == [1]
    assert kafka_cluster.address(1) == "{address}"
    topic = kafka_cluster_topic()  # replicated to min(3, brokers) = 1
    assert kafka_cluster.leader(topic) == 1
    for fault in ("kill", "stop", "start", "restart", "pause", "resume"):
        with pytest.raises(BrokerFaultError, match="not supported for an external cluster .* --kafka-bootstrap"):
            getattr(kafka_cluster, fault)(1)
"""


def _external_topics(address: str) -> set[str]:
    async def run() -> set[str]:
        async with Admin(bootstrap_servers=address) as admin:
            return await admin.list_topics()

    return asyncio.run(run())


def test_kafka_bootstrap_option_and_env_var(
    pytester: pytest.Pytester, second_broker: BrokerMinServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = second_broker.bootstrap_servers
    pytester.makepyfile(helpers=HELPERS, test_inner=EXTERNAL_TESTS.format(address=address))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--kafka-bootstrap={address}")
    result.assert_outcomes(passed=2)
    monkeypatch.setenv("KAFKAKIT_TEST_BOOTSTRAP", address)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert _external_topics(address) == set(), "the inner tests' topics were deleted"


def test_testcontainers_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner="""
import sys


def test_loading_the_plugin_started_nothing():
    assert "kafkakit.testing.brokers" not in sys.modules and "kafkakit.broker" not in sys.modules
    assert "kafkakit.testing.cluster" not in sys.modules


def test_broker(kafka_broker):
    assert kafka_broker.mode == "testcontainers" and kafka_broker.bootstrap_servers
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "--kafka-backend=testcontainers")
    output = result.stdout.str()
    reason = docker_unavailable_reason()
    if reason is None:  # a Docker engine answers here: the broker is a real Kafka container
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        assert "needs a running Docker engine, and none answered" in output


CLUSTER_TESTS = """
from helpers import *


def test_the_cluster_is_three_child_processes(kafka_cluster):
    assert kafka_cluster.mode == "process" and kafka_cluster.node_ids == [1, 2, 3]
    assert kafka_cluster.bootstrap_servers == ",".join(kafka_cluster.address(n) for n in (1, 2, 3))
    assert kafka_cluster.config == {"min.insync.replicas": "2"}  # from the ini file
    for node in (1, 2, 3):
        assert kafka_cluster.is_running(node) and kafka_cluster.live_brokers(node) == {1, 2, 3}
        assert "listening on " + kafka_cluster.address(node) in kafka_cluster.log_path(node).read_text()


def test_acks_all_survives_killing_the_leader(kafka_cluster, kafka_cluster_topic):
    topic = kafka_cluster_topic(name="killed-leader")
    state = kafka_cluster.partition_state(topic)
    assert sorted(state.replicas) == sorted(state.isr) == [1, 2, 3]
    leader = kafka_cluster.leader(topic)

    async def produce():
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all") as producer:
            for i in range(200):
                if i == 100:
                    kafka_cluster.kill(leader)
                await producer.send_and_wait(topic, b"%d" % i)

    asyncio.run(produce())
    assert not kafka_cluster.is_running(leader)
    assert consume(kafka_cluster.bootstrap_servers, topic, 200) == [b"%d" % i for i in range(200)]
    assert kafka_cluster.leader(topic) not in (leader, -1)


def test_the_killed_node_is_back(kafka_cluster):
    for node in (1, 2, 3):
        assert kafka_cluster.is_running(node) and kafka_cluster.live_brokers(node) == {1, 2, 3}


def test_stop_moves_leadership_first_and_a_paused_node_is_left(kafka_cluster, kafka_cluster_topic):
    topic = kafka_cluster_topic()
    leader = kafka_cluster.leader(topic)
    kafka_cluster.stop(leader)  # a controlled shutdown
    assert not kafka_cluster.is_running(leader)
    deadline = time.monotonic() + 5
    while kafka_cluster.leader(topic) == leader and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kafka_cluster.leader(topic) not in (leader, -1)
    produce(kafka_cluster.bootstrap_servers, topic, 10)
    other = next(n for n in kafka_cluster.node_ids if n != leader)
    kafka_cluster.pause(other)
    assert not kafka_cluster.is_running(other)
    with pytest.raises(BrokerFaultError, match="not running"):
        kafka_cluster.pause(leader)


def test_fails_and_shows_every_node_log(kafka_cluster, kafka_cluster_topic):
    assert all(kafka_cluster.is_running(n) for n in (1, 2, 3))  # started and resumed again
    kafka_cluster_topic(name="topic-made-by-the-failing-cluster-test")
    assert False, "deliberate failure"
"""


def test_kafka_cluster_is_a_local_cluster_that_takes_node_faults(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkafka_cluster_config =\n    min.insync.replicas=2\n")
    pytester.makepyfile(helpers=HELPERS, test_inner=CLUSTER_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning", "--kafka-cluster-nodes=3"
    )
    result.assert_outcomes(passed=4, failed=1)
    output = result.stdout.str()
    sections = [_node_section(output, node) for node in (1, 2, 3)]
    # Only what each node logged while the failing test ran: its topic, not the starts before it.
    assert any("topic-made-by-the-failing-cluster-test-0" in section for section in sections)
    assert not any("listening on" in section for section in sections)
    assert "kafka broker log" not in output  # no single broker was started


def _node_section(output: str, node: int, when: str = "call") -> str:
    """The body of the "kafka cluster node N log ... <when>" report section."""
    pattern = rf"^-+ kafka cluster node {node} log \(.*\) {when} -+$\n(.*?)(?=^[-=_]{{5,}})"
    match = re.search(pattern, output, re.M | re.S)
    assert match is not None, f"no log section of node {node} for {when} in:\n{output}"
    return match.group(1)


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkafka_broker_mode = threads\n")
    pytester.makepyfile(test_inner="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "kafka_broker_mode = 'threads': expected one of process, thread" in result.stderr.str()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kafka-broker-mode=process", "--kafka-cluster-nodes=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "kafka_cluster_nodes = '0': expected a number of nodes, 1 or more" in result.stderr.str()
