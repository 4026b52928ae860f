"""Cluster mode: ACLs and SCRAM credentials come from the metadata log, not from the node's files.

Kafka's brokers load ACLs into their StandardAuthorizer and SCRAM credentials into their
credential cache from the metadata image (AclPublisher, ScramPublisher). Here
:class:`SecurityPublisher` is the loader's publisher that does that: whenever a batch of
metadata records (or a snapshot) changes the image's ACLs or credentials, the broker's
:class:`~kafkakit.broker.security.authorizer.Authorizer` (when ``authorizer.class.name`` is
set) and :class:`~kafkakit.broker.security.credentials.ScramCredentialStore` are set to exactly
the image's. What the node's own ``.kafkakit-security`` files held is dropped when the
publisher is built, so a cluster node never authorizes or authenticates from local state.

``--add-scram`` in cluster mode: Kafka's ``kafka-storage format --add-scram`` writes the
credentials into the bootstrap metadata. broker_min has no format step, so a cluster node
started with ``--add-scram`` sends each entry to the active controller as an
AlterUserScramCredentials upsertion (salted here, a new salt each start, as on a single node)
once the quorum answers, retrying until it is accepted; the credential then reaches every node
through the metadata log. Until then the user cannot log in (:meth:`SecurityPublisher.wait_bootstrapped`).

:func:`wait_for_image` is what the forwarding handlers (CreateAcls, DeleteAcls,
AlterUserScramCredentials) use to wait until a change the controller made is in this node's image.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kafkakit.broker.metadata import MetadataDelta, MetadataImage
from kafkakit.broker.security.credentials import AddScram
from kafkakit.protocol.build import make_request
from kafkakit.security import scram
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker")

ALTER_USER_SCRAM_CREDENTIALS = 51
#: Seconds one attempt to hand an ``--add-scram`` entry to the controller may take.
BOOTSTRAP_ATTEMPT_TIMEOUT = 30.0
BOOTSTRAP_RETRY_BACKOFF = 1.0


class SecurityPublisher:
    """Keeps ``state.authorizer`` and ``state.scram_credentials`` equal to the metadata image's."""

    def __init__(self, state: BrokerState, bootstrap: Sequence[AddScram] = ()) -> None:
        self.state = state
        self._bootstrap = list(bootstrap)
        self._image: MetadataImage | None = None
        self._task: asyncio.Task[None] | None = None
        self._bootstrapped = asyncio.Event()
        if not self._bootstrap:
            self._bootstrapped.set()
        # Local state (files from a single-node past, --add-scram applied at start) is not cluster state.
        if state.authorizer is not None:
            state.authorizer.replace_bindings(())
        state.scram_credentials.replace_all(())

    def on_metadata(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """The loader's publisher callback."""
        replaced = image is not self._image  # a snapshot replaced the image (or the first call)
        self._image = image
        if self.state.authorizer is not None and (replaced or delta.changed_acls):
            self.state.authorizer.replace_bindings(image.security.acls.values())
        if replaced or delta.changed_scram:
            self.state.scram_credentials.replace_all(
                (user, info.name, credential)
                for (user, mechanism), credential in image.security.scram.items()
                if (info := _mechanism(mechanism)) is not None
            )

    # -- --add-scram -----------------------------------------------------------------------------

    def start(self) -> None:
        """Hand the ``--add-scram`` entries to the controller in the background."""
        if self._bootstrap and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._send_bootstrap(), name="kafkakit-add-scram")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def wait_bootstrapped(self, timeout: float) -> None:
        """Wait until every ``--add-scram`` entry is in this node's image (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout):
            await self._bootstrapped.wait()

    async def _send_bootstrap(self) -> None:
        for entry in self._bootstrap:
            # One request per entry: Kafka's controller refuses one user twice in a request.
            while not await self._send_one(entry):
                await asyncio.sleep(BOOTSTRAP_RETRY_BACKOFF)
        self._bootstrapped.set()

    async def _send_one(self, entry: AddScram) -> bool:
        channel = self.state.controller_channel
        if channel is None:
            return False
        info = scram.mechanism(entry.mechanism)
        salt = os.urandom(32)
        upsertion = {
            "name": entry.user,
            "mechanism": info.type,
            "iterations": entry.iterations,
            "salt": salt,
            "salted_password": scram.salted_password(info.name, entry.password, salt, entry.iterations),
        }
        request = make_request(ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[upsertion])
        try:
            response = await channel.send(request, BOOTSTRAP_ATTEMPT_TIMEOUT)
        except (TimeoutError, ConnectionError) as exc:
            log.info("--add-scram %s for %s: controller not reachable yet (%s); retrying", info.name, entry.user, exc)
            return False
        for result in response.results:
            if result.error_code != ErrorCode.none:
                # The entry was parsed at start, so a refusal will not change on a retry.
                log.error("--add-scram %s for %s refused by the controller: %s %s", info.name, entry.user,
                          ErrorCode(result.error_code).name, result.error_message)  # fmt: skip
                return True
        key = (entry.user, info.type)
        found = await wait_for_image(
            self.state, lambda image: (c := image.security.scram.get(key)) is not None and c.salt == salt, 10.0
        )
        if found:
            log.info("--add-scram: %s credential for %s is in the cluster metadata", info.name, entry.user)
        return found


async def wait_for_image(state: BrokerState, done: Callable[[MetadataImage], bool], timeout: float) -> bool:
    """Wait until ``done(state.image)`` (a change the controller committed reached this node); True if it did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while state.image is None or not done(state.image):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _mechanism(wire_type: int) -> scram.ScramMechanism | None:
    try:
        return scram.mechanism_by_type(wire_type)
    except ValueError:
        return None


__all__ = ["SecurityPublisher", "wait_for_image"]
