"""The coordinator <-> child channel: pickled messages in checked frames over a private socket.

A frame is `MAGIC (4 bytes) | payload length (4, big-endian) | crc32 of the payload (4) | payload`.
A user's model shares its process with one end of the socket and may write to a file descriptor it
does not own; such bytes never pass for a message: a wrong magic, an impossible length or a bad
checksum raises `BadFrame` with one line that says so, and the supervisor fails only the work in hand
(the child is discarded, the sweep goes on in a fresh one). Reading never blocks past the caller's
deadline, even inside a frame cut short.

Sends are serialised by a lock (a child's log forwarding may send from any thread).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import threading
import time
import zlib
from typing import Any

MAGIC = b"MLB\x01"
_HEADER = struct.Struct(">4sII")
MAX_PAYLOAD = 1 << 30
"""The largest message (1 GiB): a record with a million raw samples is a few tens of MB."""
_READ = 1 << 20

TIMEOUT = object()
"""What `Channel.receive` gives when the deadline passed before a whole message arrived."""


class BadFrame(Exception):
    """Bytes on the channel that are not a message of ours; the text says what was wrong, in a few words."""


class ChannelClosed(Exception):
    """The other end closed the channel (its process exited or was killed)."""


class Channel:
    """One end of the socket (a file descriptor this object owns and closes)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._send_lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def send(self, message: Any) -> None:
        """Write one message (OSError when the other end is gone)."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        data = _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload
        with self._send_lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]

    def receive(self, deadline: float | None = None) -> Any:
        """The next message; TIMEOUT once `deadline` (time.monotonic) passes first; ChannelClosed at
        end-of-file; BadFrame for bytes that are not a message."""
        while True:
            message = self._take()
            if message is not None:
                return message[0]
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._readable(timeout):
                return TIMEOUT
            try:
                data = os.read(self.fd, _READ)
            except InterruptedError:
                continue
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not data:
                if self._buffer:
                    raise BadFrame(f"{len(self._buffer)} bytes and then end-of-file")
                raise ChannelClosed("end of file")
            self._buffer += data

    def _readable(self, timeout: float | None) -> bool:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poller.poll(None if timeout is None else int(timeout * 1000) + 1))

    def _take(self) -> tuple[Any] | None:
        """(message,) when the buffer starts with a whole frame (which it removes), None when more is needed."""
        buffer = self._buffer
        if len(buffer) >= 4 and bytes(buffer[:4]) != MAGIC:
            raise BadFrame(f"a frame starting {bytes(buffer[:8])!r}")
        if len(buffer) < _HEADER.size:
            return None
        _, length, crc = _HEADER.unpack_from(buffer)
        if length > MAX_PAYLOAD:
            raise BadFrame(f"a frame of {length} bytes, more than {MAX_PAYLOAD}")
        end = _HEADER.size + length
        if len(buffer) < end:
            return None
        payload = bytes(buffer[_HEADER.size:end])
        del buffer[:end]
        if zlib.crc32(payload) != crc:
            raise BadFrame("a frame whose checksum does not match")
        try:
            return (pickle.loads(payload),)
        except Exception as exc:  # noqa: BLE001 - any unreadable payload is the same finding
            raise BadFrame(f"a frame that does not unpickle: {type(exc).__name__}") from None
