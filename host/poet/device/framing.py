"""Frames of the serial protocol (docs/spec.md section 6): COBS-encoded packets ended by 0x00.

A packet is [type][seq][payload][crc32 of type, seq and payload]. COBS (Cheshire & Baker, 1999)
replaces every 0x00 by the distance to the next one, so 0x00 appears only at a frame's end: a
receiver that lost, gained or garbled bytes is back in step at the next frame whatever happened,
which a length field cannot promise (a corrupted length swallows the frames after it).
"""

from __future__ import annotations

import struct
import zlib

PAYLOAD_MAX = 1024
PACKET_MAX = 2 + PAYLOAD_MAX + 4


def cobs_encode(data: bytes) -> bytes:
    out = bytearray()
    i = 0
    while True:
        run = 0
        while i + run < len(data) and data[i + run] != 0 and run < 254:
            run += 1
        out.append(run + 1)
        out += data[i:i + run]
        i += run
        if i == len(data):
            return bytes(out)
        if run == 254:  # a full block takes no zero
            continue
        i += 1
        if i == len(data):  # the data ended with that zero: an empty last block
            out.append(1)
            return bytes(out)


def cobs_decode(data: bytes) -> bytes | None:
    """The packet, or None when a block runs past the end (a frame cut short or garbled)."""
    out = bytearray()
    i = 0
    while i < len(data):
        code = data[i]
        if code == 0 or i + code > len(data):
            return None
        out += data[i + 1:i + code]
        i += code
        if code != 0xFF and i < len(data):
            out.append(0)
    return bytes(out)


def encode_frame(msg_type: int, seq: int, payload: bytes = b"") -> bytes:
    if len(payload) > PAYLOAD_MAX:
        raise ValueError(f"frame payload of {len(payload)} bytes exceeds {PAYLOAD_MAX}")
    packet = bytes([msg_type, seq]) + payload
    return cobs_encode(packet + struct.pack("<I", zlib.crc32(packet))) + b"\0"


class FrameReader:
    """Splits a byte stream into (type, seq, payload) frames; damaged ones are counted and dropped."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.bad_frames = 0

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        self._buf += data
        out = []
        while True:
            end = self._buf.find(0)
            if end < 0:
                if len(self._buf) > 2 * PACKET_MAX:  # no delimiter for far too long: noise
                    self.bad_frames += 1
                    self._buf.clear()
                return out
            raw = bytes(self._buf[:end])
            del self._buf[:end + 1]
            if not raw:
                continue
            packet = cobs_decode(raw)
            if packet is None or len(packet) < 6 or len(packet) > PACKET_MAX \
                    or zlib.crc32(packet[:-4]) != struct.unpack_from("<I", packet, len(packet) - 4)[0]:
                self.bad_frames += 1
                continue
            out.append((packet[0], packet[1], packet[2:-4]))
