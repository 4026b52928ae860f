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
from kafkakit.testing.plugin import CLUSTER_SKIP_REASON

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
    result.assert_outcomes(passed=1)
    monkeypatch.setenv("KAFKAKIT_TEST_BOOTSTRAP", address)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert _external_topics(address) == set(), "the inner tests' topics were deleted"


def test_testcontainers_backend_and_kafka_cluster_without_bootstrap(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner="""
import sys


def test_loading_the_plugin_started_nothing():
    assert "kafkakit.testing.brokers" not in sys.modules and "kafkakit.broker" not in sys.modules


def test_broker(kafka_broker):
    assert kafka_broker.mode == "testcontainers" and kafka_broker.bootstrap_servers


def test_cluster(kafka_cluster):
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "--kafka-backend=testcontainers")
    output = result.stdout.str()
    assert CLUSTER_SKIP_REASON in output
    reason = docker_unavailable_reason()
    if reason is None:  # a Docker engine answers here: the broker is a real Kafka container
        result.assert_outcomes(passed=2, skipped=1)
    else:
        result.assert_outcomes(passed=1, skipped=2)
        assert "needs a running Docker engine, and none answered" in output


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkafka_broker_mode = threads\n")
    pytester.makepyfile(test_inner="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "kafka_broker_mode = 'threads': expected one of process, thread" in result.stderr.str()
