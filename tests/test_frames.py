"""kafkakit.net.frames: response frames read over a real socket into one reused buffer.

A server writes size-prefixed frames cut at awkward places (one byte at a time, a
frame far larger than the initial buffer, hundreds of frames in one write); the
client's FrameProtocol must hand back exactly the frames sent, in order.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct

from kafkakit.net.frames import FrameError, FrameProtocol


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def _read_frames(wire: bytes, cuts: list[int], *, delay: float = 0.0) -> tuple[list[bytes], list[BaseException | None]]:
    """Serve ``wire`` in pieces ending at ``cuts``, then close; return the frames and the loss reasons."""

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        start = 0
        for end in [*cuts, len(wire)]:
            writer.write(wire[start:end])
            await writer.drain()
            if delay:
                await asyncio.sleep(delay)
            start = end
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    frames: list[bytes] = []
    lost: list[BaseException | None] = []
    transport, protocol = await asyncio.get_running_loop().create_connection(
        lambda: FrameProtocol(lambda view: frames.append(bytes(view)), lost.append), "127.0.0.1", port
    )
    await asyncio.wait_for(protocol.closed, 10)
    transport.close()
    server.close()
    await server.wait_closed()
    return frames, lost


async def test_frames_come_back_whole_however_the_stream_is_cut() -> None:
    rng = random.Random(7)
    bodies = [os.urandom(rng.choice([4, 5, 100, 3000])) for _ in range(300)]
    bodies.insert(150, os.urandom(5_000_000))  # far beyond the initial buffer: it must grow
    bodies.append(os.urandom(70_000))  # and later frames reuse (or outgrow) it
    wire = b"".join(map(_frame, bodies))
    cuts = sorted(rng.sample(range(1, len(wire)), 400))
    frames, lost = await _read_frames(wire, cuts)
    assert frames == bodies
    assert len(lost) == 1 and not isinstance(lost[0], FrameError)


async def test_a_frame_dribbling_in_byte_by_byte() -> None:
    body = os.urandom(64)
    wire = _frame(body) + _frame(b"next")
    frames, _ = await _read_frames(wire, list(range(1, len(wire))), delay=0.001)
    assert frames == [body, b"next"]


async def test_a_frame_size_no_broker_sends_closes_the_connection() -> None:
    wire = _frame(b"good") + struct.pack(">i", -5) + b"junk" + _frame(b"never")
    frames, lost = await _read_frames(wire, [])
    assert frames == [b"good"]
    assert isinstance(lost[0], FrameError) and "invalid response size -5" in str(lost[0])
    assert len(lost) == 1  # reported once, not again when the transport closes
