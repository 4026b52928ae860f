"""Partition directory names as Apache Kafka lays them out: ``<topic>-<N>``."""

from __future__ import annotations

import re

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``("my-topic", 3)`` for ``"my-topic-3"``; None if the name is not a partition directory."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or not is_valid_topic_name(topic):
        return None
    return topic, int(number)


def is_valid_topic_name(topic: str) -> bool:
    """Kafka's rule: 1-249 characters of ``[A-Za-z0-9._-]``, and not "." or ".."."""
    return bool(_TOPIC_RE.fullmatch(topic)) and topic not in (".", "..")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"
