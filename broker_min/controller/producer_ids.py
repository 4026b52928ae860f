"""Producer id blocks on the controller: Kafka's ProducerIdControlManager (AllocateProducerIds).

Each block is a ProducerIdsRecord naming the broker that got it and the next id to hand
out; the image's ``next_producer_id`` is the first id of the next block. The broker's epoch
is checked by the caller (ClusterControlManager.check_broker_epoch).
"""

from __future__ import annotations

from kafkakit.broker.metadata import MetadataImage, MetadataRecord, ProducerIdsRecord

from .api_types import ControllerSettings


class ProducerIdControlManager:
    """Hands out blocks of ``producer_id_block_size`` producer ids."""

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings

    def generate_next_block(
        self, image: MetadataImage, broker_id: int, broker_epoch: int
    ) -> tuple[tuple[int, int], list[MetadataRecord]]:
        """The next block, (first id, count), and the record that hands it to ``broker_id``."""
        start = image.next_producer_id
        size = self.settings.producer_id_block_size
        return (start, size), [ProducerIdsRecord(broker_id, broker_epoch, start + size)]
