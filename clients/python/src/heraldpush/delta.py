"""Delta compression (docs/protocol.md, "Delta compression").

A subscription that asked for ``delta="fossil"`` may receive a message whose ``data`` is a
Fossil delta against the data of the topic's previous message on the connection. This module
applies them: the Fossil decoder, the base bytes a delta applies to (read from the frame's raw
text or MessagePack bytes), and :class:`Bases`, the one base per topic a connection keeps.

The decoder is written here rather than taken from PyPI: the one package there
(``fossil-delta``, last released in 2017) is a C extension wrapping Fossil's ``delta.c`` with
no wheels for current Pythons, and nothing else maintained exists. This one follows delta.c,
with every read bounds-checked, the claimed size bounded before anything is allocated, and
every malformed input a :class:`DeltaError` (never another exception, never a hang: each step
consumes input).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgpack

__all__ = ["DeltaError", "MAX_DELTA_TARGET", "apply_fossil", "fossil_checksum", "json_data_text",
           "poll_message_texts", "msgpack_data_bytes", "json_array_texts", "msgpack_array_items", "Bases"]

#: The largest result a delta may claim (64 MiB): past it the delta is refused unread.
MAX_DELTA_TARGET = 64 << 20

_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"
_VALUE = [-1] * 256
for _i, _c in enumerate(_DIGITS):
    _VALUE[_c] = _i


class DeltaError(ValueError):
    """A delta that cannot be applied: malformed, too large, a bad checksum, or no base."""

    code = "bad_delta"


def fossil_checksum(b: bytes | bytearray | memoryview) -> int:
    """Fossil's checksum: the sum of the bytes as big-endian 32-bit words, the tail padded."""
    n4 = len(b) & ~3
    total = sum(int.from_bytes(b[i:i + 4], "big") for i in range(0, n4, 4))
    tail = bytes(b[n4:])
    if tail:
        total += int.from_bytes(tail + b"\0" * (4 - len(tail)), "big")
    return total & 0xFFFFFFFF


def apply_fossil(base: bytes, delta: bytes, max_size: int = MAX_DELTA_TARGET) -> bytes:
    """Applies a Fossil delta to ``base``. Raises :class:`DeltaError` for anything malformed: a
    claimed size over ``max_size``, a copy outside the base, an insert past the delta's end, a
    result not of the claimed size, a bad checksum, a missing terminator."""
    pos = 0
    n = len(delta)

    def number() -> int:
        nonlocal pos
        v = 0
        start = pos
        while pos < n:
            d = _VALUE[delta[pos]]
            if d < 0:
                break
            v = v * 64 + d
            if v > 0xFFFFFFFF:
                raise DeltaError("delta: a number past 32 bits")
            pos += 1
        if pos == start:
            raise DeltaError(f"delta: a number expected at byte {start}")
        return v

    size = number()
    if pos >= n or delta[pos] != 0x0A:
        raise DeltaError("delta: the size is not followed by a newline")
    pos += 1
    if size > max_size:
        raise DeltaError(f"delta: claims a result of {size} bytes (at most {max_size})")
    out = bytearray()
    while pos < n:
        cnt = number()
        if pos >= n:
            break
        op = delta[pos]
        pos += 1
        if op == 0x40:  # '@': copy cnt bytes of the base from an offset, then ','
            ofst = number()
            if pos >= n or delta[pos] != 0x2C:
                raise DeltaError("delta: a copy not ended by ','")
            pos += 1
            if cnt > size - len(out):
                raise DeltaError("delta: a copy past the claimed size")
            if ofst + cnt > len(base):
                raise DeltaError("delta: a copy past the end of the base")
            out += base[ofst:ofst + cnt]
        elif op == 0x3A:  # ':': insert the cnt bytes that follow
            if cnt > size - len(out):
                raise DeltaError("delta: an insert past the claimed size")
            if cnt > n - pos:
                raise DeltaError("delta: an insert past the end of the delta")
            out += delta[pos:pos + cnt]
            pos += cnt
        elif op == 0x3B:  # ';': the checksum of the result; the end
            if len(out) != size:
                raise DeltaError(f"delta: {len(out)} bytes made, {size} claimed")
            if pos != n:
                raise DeltaError("delta: bytes after the checksum")
            if cnt != fossil_checksum(out):
                raise DeltaError("delta: bad checksum")
            return bytes(out)
        else:
            raise DeltaError(f"delta: unknown command at byte {pos - 1}")
    raise DeltaError("delta: no checksum (truncated)")


# ---------------------------------------------------------------------------- base bytes

_DATA_KEY = '"data":'


def json_data_text(frame: str) -> str:
    """A JSON message frame's ``data`` text, exactly: after the first ``"data":`` up to the
    frame's final ``}`` (Herald writes ``data`` last)."""
    at = frame.find(_DATA_KEY)
    end = frame.rfind("}")
    if at < 0 or end < at + len(_DATA_KEY):
        raise DeltaError("a message frame without data")
    return frame[at + len(_DATA_KEY):end]


def _skip_string(text: str, i: int) -> int:
    n = len(text)
    i += 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    raise DeltaError("unterminated JSON string")


_WS = " \t\r\n"


def _skip_json(text: str, i: int) -> int:
    """The end of the JSON value at ``i`` (whitespace before it skipped), in a document already
    known to be valid JSON."""
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    if i >= n:
        raise DeltaError("a JSON value expected")
    c = text[i]
    if c == '"':
        return _skip_string(text, i)
    if c in "{[":
        depth = 0
        while i < n:
            c = text[i]
            if c == '"':
                i = _skip_string(text, i)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        raise DeltaError("unterminated JSON value")
    while i < n and text[i] not in ",}] \t\r\n":
        i += 1
    return i


def poll_message_texts(answer: str) -> list[str]:
    """The raw text of each message of a poll answer (``{"messages":[{..},..],..}``), in order."""
    n = len(answer)
    i = answer.find("{") + 1
    if i == 0:
        raise DeltaError("poll answer: not an object")
    while True:
        while i < n and answer[i] in _WS + ",":
            i += 1
        if i >= n or answer[i] != '"':
            raise DeltaError("poll answer: no messages")
        key_end = _skip_string(answer, i)
        key = answer[i:key_end]
        i = answer.find(":", key_end) + 1
        if i == 0:
            raise DeltaError("poll answer: a key without a value")
        if key != '"messages"':
            i = _skip_json(answer, i)
            continue
        while i < n and answer[i] in _WS:
            i += 1
        if i >= n or answer[i] != "[":
            raise DeltaError("poll answer: messages is not a list")
        i += 1
        out: list[str] = []
        while True:
            while i < n and answer[i] in _WS + ",":
                i += 1
            if i >= n:
                raise DeltaError("poll answer: unterminated messages")
            if answer[i] == "]":
                return out
            end = _skip_json(answer, i)
            out.append(answer[i:end])
            i = end


#: A JSON string, or one of the characters that open, close or separate values.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')


def json_array_texts(frame: str) -> list[str]:
    """The raw text of each element of a JSON array (a batch frame ``[{..},{..}]``), in
    order, in a document already known to be valid JSON. Strings are skipped whole by the
    regular expression (not a character at a time)."""
    start = frame.find("[")
    if start < 0:
        raise DeltaError("a batch frame that is not an array")
    out: list[str] = []
    depth = 0
    item = start + 1
    for m in _JSON_TOKEN.finditer(frame, start + 1):
        c = m.group()
        if c in "{[":
            depth += 1
        elif c in "}]":
            if depth == 0:  # the array's own ]
                last = frame[item:m.start()].strip()
                if last:
                    out.append(last)
                return out
            depth -= 1
        elif c == "," and depth == 0:
            out.append(frame[item:m.start()].strip())
            item = m.end()
    raise DeltaError("an unterminated batch frame")


class _Skipper:
    def __init__(self, b: bytes) -> None:
        self.b = b
        self.pos = 0

    def need(self, n: int) -> int:
        if n > len(self.b) - self.pos:
            raise DeltaError("truncated MessagePack")
        at = self.pos
        self.pos += n
        return at

    def uint(self, n: int) -> int:
        at = self.need(n)
        return int.from_bytes(self.b[at:at + n], "big")

    def map_header(self) -> int:
        c = self.b[self.need(1)]
        if 0x80 <= c <= 0x8F:
            return c & 0x0F
        if c == 0xDE:
            return self.uint(2)
        if c == 0xDF:
            return self.uint(4)
        raise DeltaError("a MessagePack frame that is not a map")

    _FIXED = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4,
              0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
    _SIZED = {0xC4: 1, 0xD9: 1, 0xC5: 2, 0xDA: 2, 0xC6: 4, 0xDB: 4}
    _EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}

    def skip(self, depth: int = 0) -> None:
        if depth > 100:
            raise DeltaError("MessagePack nested too deep")
        c = self.b[self.need(1)]
        if c <= 0x7F or c >= 0xE0 or c in (0xC0, 0xC2, 0xC3):
            return
        if 0xA0 <= c <= 0xBF:
            self.need(c & 0x1F)
        elif 0x80 <= c <= 0x8F:
            self.items(2 * (c & 0x0F), depth)
        elif 0x90 <= c <= 0x9F:
            self.items(c & 0x0F, depth)
        elif c in self._FIXED:
            self.need(self._FIXED[c])
        elif c in self._SIZED:
            self.need(self.uint(self._SIZED[c]))
        elif c in self._EXT:
            self.need(self.uint(self._EXT[c]) + 1)
        elif c == 0xDC:
            self.items(self.uint(2), depth)
        elif c == 0xDD:
            self.items(self.uint(4), depth)
        elif c == 0xDE:
            self.items(2 * self.uint(2), depth)
        elif c == 0xDF:
            self.items(2 * self.uint(4), depth)
        else:
            raise DeltaError(f"MessagePack: bad byte 0x{c:02x}")

    def items(self, n: int, depth: int) -> None:
        for _ in range(n):
            self.skip(depth + 1)


def msgpack_data_bytes(frame: bytes) -> bytes:
    """The bytes of the ``data`` value of a MessagePack message frame (a map), exactly as sent."""
    r = _Skipper(frame)
    for _ in range(r.map_header()):
        key_start = r.pos
        r.skip()
        key = frame[key_start:r.pos]
        start = r.pos
        r.skip()
        if key == b"\xa4data":
            return frame[start:r.pos]
    raise DeltaError("a message frame without data")


def msgpack_array_items(frame: bytes) -> list[bytes]:
    """The bytes of each element of a MessagePack array (a batch frame), exactly as sent."""
    r = _Skipper(frame)
    c = frame[r.need(1)] if frame else -1
    if 0x90 <= c <= 0x9F:
        n = c & 0x0F
    elif c == 0xDC:
        n = r.uint(2)
    elif c == 0xDD:
        n = r.uint(4)
    else:
        raise DeltaError("a MessagePack batch frame that is not an array")
    out: list[bytes] = []
    for _ in range(n):
        start = r.pos
        r.skip()
        out.append(frame[start:r.pos])
    return out


# ---------------------------------------------------------------------------- bases


class Bases:
    """One base per topic (the data of its last message on this connection), kept for the topics
    that asked for deltas: at most one per subscribed topic, dropped with the topic."""

    def __init__(self, wants: Callable[[str], bool]) -> None:
        self._wants = wants
        self._bases: dict[str, bytes | str] = {}

    def __len__(self) -> int:
        return len(self._bases)

    def drop(self, topic: str) -> None:
        self._bases.pop(topic, None)

    def clear(self) -> None:
        self._bases.clear()

    def _take(self, topic: str) -> bytes:
        base = self._bases.pop(topic, None)
        if base is None:
            raise DeltaError(f"delta: no base held for {topic}")
        return base.encode("utf-8") if isinstance(base, str) else base

    def full_json(self, topic: str, frame: Callable[[], str]) -> None:
        """A full message read from a JSON frame (``frame``: its raw text)."""
        if self._wants(topic):
            self._bases[topic] = json_data_text(frame())
        else:
            self._bases.pop(topic, None)

    def delta_json(self, topic: str, delta: Any) -> Any:
        """A delta read from a JSON frame: the full data (the new base kept)."""
        base = self._take(topic)
        if not isinstance(delta, str):
            raise DeltaError("delta: data is not a string")
        try:
            raw = delta.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DeltaError(f"delta: not UTF-8: {e}") from e
        out = apply_fossil(base, raw)
        try:
            text = out.decode("utf-8")
            data = json.loads(text)
        except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise DeltaError(f"delta: the result is not JSON: {e}") from e
        if self._wants(topic):
            self._bases[topic] = text
        return data

    def full_msgpack(self, topic: str, frame: bytes | Callable[[], bytes]) -> None:
        """A full message read from a MessagePack frame (``frame``: its bytes, or a function
        giving them, called only for a topic that asked for deltas)."""
        if self._wants(topic):
            self._bases[topic] = msgpack_data_bytes(frame if isinstance(frame, bytes) else frame())
        else:
            self._bases.pop(topic, None)

    def delta_msgpack(self, topic: str, delta: Any) -> Any:
        """A delta read from a MessagePack frame (``delta``: the bin): the full data."""
        base = self._take(topic)
        if not isinstance(delta, (bytes, bytearray)):
            raise DeltaError("delta: data is not bin")
        out = apply_fossil(base, bytes(delta))
        try:
            data = msgpack.unpackb(out, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several unrelated types
            raise DeltaError(f"delta: the result is not MessagePack: {e}") from e
        if self._wants(topic):
            self._bases[topic] = out
        return data
