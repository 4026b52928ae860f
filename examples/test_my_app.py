"""Testing an app with kafkakit's pytest fixtures, whatever Kafka client the app uses.

    python -m pytest examples/test_my_app.py      # or: python examples/test_my_app.py

``pip install "kafkakit[testing]"`` registers the fixtures: ``kafka_broker`` (a
broker_min child process for the session) and ``kafka_topic`` (a fresh topic
per call, deleted after the test). The "app" is two functions that turn orders
into Kafka records and add up the amounts of the records read back; each test
wires it to one client library: kafkakit, aiokafka, confluent-kafka and
kafka-python. The last test crashes the broker (SIGKILL) between producing
and consuming, and checks that every acknowledged order survived the restart.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterable

import pytest
from kafkakit.testing import KafkaBroker, TopicFactory

# --- the app under test ------------------------------------------------------

ORDERS = [(1, 1250), (2, 399), (3, 10000), (4, 1)]


def order_record(order_id: int, amount_cents: int) -> tuple[bytes, bytes]:
    """An order as a Kafka (key, value): keyed by order id, JSON body."""
    return str(order_id).encode(), json.dumps({"order": order_id, "amount": amount_cents}).encode()


def total_cents(values: Iterable[bytes]) -> int:
    """What the app computes from the records it reads: the sum of the amounts."""
    return sum(json.loads(value)["amount"] for value in values)


EXPECTED_TOTAL = sum(amount for _, amount in ORDERS)


# --- one test per client library ----------------------------------------------


def test_with_kafkakit(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None:
    from kafkakit import Consumer, Producer, TopicPartition

    topic = kafka_topic(partitions=2)

    async def run() -> list[bytes]:
        async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all") as producer:
            for order_id, amount in ORDERS:
                key, value = order_record(order_id, amount)
                await producer.send_and_wait(topic, value=value, key=key)
        values: list[bytes] = []
        async with Consumer(
            bootstrap_servers=kafka_broker.bootstrap_servers, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            deadline = time.monotonic() + 20
            while len(values) < len(ORDERS) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    values += [r.value for r in records if r.value is not None]
        return values

    assert total_cents(asyncio.run(run())) == EXPECTED_TOTAL


def test_with_aiokafka(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = kafka_topic()

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for order_id, amount in ORDERS:
                key, value = order_record(order_id, amount)
                await producer.send_and_wait(topic, value=value, key=key)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka_broker.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            records = await consumer.getmany(timeout_ms=10000, max_records=len(ORDERS))
            return [r.value for batch in records.values() for r in batch]
        finally:
            await consumer.stop()

    assert total_cents(asyncio.run(run())) == EXPECTED_TOTAL


def test_with_confluent_kafka(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = kafka_topic()
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "acks": "all"})
    for order_id, amount in ORDERS:
        key, value = order_record(order_id, amount)
        producer.produce(topic, value=value, key=key)
    assert producer.flush(10) == 0, "every order delivered"

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "my-app"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < len(ORDERS) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert total_cents(values) == EXPECTED_TOTAL


def test_with_kafka_python(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = kafka_topic()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
    for order_id, amount in ORDERS:
        key, value = order_record(order_id, amount)
        producer.send(topic, value=value, key=key).get(timeout=10)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap_servers, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < len(ORDERS) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            values += [r.value for r in records]
    consumer.close()
    assert total_cents(values) == EXPECTED_TOTAL


# --- a fault: the broker crashes after acknowledging the orders ---------------


def test_acknowledged_orders_survive_a_broker_crash(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    if kafka_broker.mode != "process":
        pytest.skip("crashing the broker needs broker_min in process mode (the default)")
    from kafkakit import Consumer, Producer, TopicPartition

    topic = kafka_topic()
    many = [(order_id, 100 + order_id) for order_id in range(500)]

    async def produce() -> None:
        async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all") as producer:
            futures = []
            for order_id, amount in many:
                key, value = order_record(order_id, amount)
                futures.append(await producer.send(topic, value=value, key=key))
            await asyncio.gather(*futures)  # every order acknowledged

    async def consume() -> list[bytes]:
        values: list[bytes] = []
        async with Consumer(
            bootstrap_servers=kafka_broker.bootstrap_servers, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            deadline = time.monotonic() + 20
            while len(values) < len(many) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    values += [r.value for r in records if r.value is not None]
        return values

    asyncio.run(produce())
    kafka_broker.kill()  # SIGKILL: no clean shutdown, nothing flushed by the broker
    kafka_broker.restart()  # same data dir and port: clients reconnect to the same address
    values = asyncio.run(consume())
    assert len(values) == len(many)
    assert total_cents(values) == sum(amount for _, amount in many)


if __name__ == "__main__":
    # tests/test_examples.py runs every example as a script: run this file's tests.
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
