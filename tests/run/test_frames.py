"""The coordinator <-> child channel: whatever bytes arrive, a message, a one-line BadFrame, end-of-file
or a timeout at the deadline, never a hang or another exception (issue 24, finding 10)."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import zlib

import pytest

from mlbench.run.frames import MAGIC, MAX_PAYLOAD, TIMEOUT, BadFrame, Channel, ChannelClosed

pytestmark = pytest.mark.timeout(30)  # a read that ignored its deadline fails here


@pytest.fixture
def ends():
    a, b = socket.socketpair()
    sender, receiver = Channel(a.detach()), Channel(b.detach())
    yield sender, receiver
    sender.close()
    receiver.close()


def frame(payload: bytes, *, magic: bytes = MAGIC, length: int | None = None, crc: int | None = None) -> bytes:
    return struct.pack(">4sII", magic, len(payload) if length is None else length,
                       zlib.crc32(payload) if crc is None else crc) + payload


def test_messages_go_through_in_order(ends):
    sender, receiver = ends
    big = ("finished", {"samples": list(range(200_000))}, None)  # larger than one read, and than the socket's buffer
    writer = threading.Thread(target=lambda: (sender.send(("ready",)), sender.send(big)))
    writer.start()
    assert receiver.receive(time.monotonic() + 5) == ("ready",)
    assert receiver.receive(time.monotonic() + 5) == big
    writer.join()


@pytest.mark.parametrize(("data", "why"), [
    (b"junkjunkjunkjunk", "a frame starting b'junkjunk'"),
    (frame(b"x" * 10, crc=1), "a frame whose checksum does not match"),
    (frame(b"", length=MAX_PAYLOAD + 1), f"a frame of {MAX_PAYLOAD + 1} bytes, more than {MAX_PAYLOAD}"),
    (frame(b"not a pickle"), "a frame that does not unpickle: UnpicklingError"),
])
def test_bytes_that_are_not_a_message_are_one_line(ends, data, why):
    sender, receiver = ends
    os.write(sender.fd, data)
    with pytest.raises(BadFrame) as info:
        receiver.receive(time.monotonic() + 5)
    assert str(info.value) == why


def test_a_frame_cut_short_waits_no_longer_than_the_deadline(ends):
    sender, receiver = ends
    os.write(sender.fd, frame(b"x" * 100)[:50])
    t0 = time.monotonic()
    assert receiver.receive(t0 + 0.3) is TIMEOUT
    assert time.monotonic() - t0 < 5
    sender.close()
    with pytest.raises(BadFrame, match=r"^50 bytes and then end-of-file$"):
        receiver.receive(time.monotonic() + 5)


def test_end_of_file_between_messages_is_a_closed_channel(ends):
    sender, receiver = ends
    sender.send(("log", "mlbench", 30, "x"))
    sender.close()
    assert receiver.receive(time.monotonic() + 5) == ("log", "mlbench", 30, "x")
    with pytest.raises(ChannelClosed):
        receiver.receive(time.monotonic() + 5)
