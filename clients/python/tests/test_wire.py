"""The wire module alone: cursors, resume lists, patterns, frames, the SSE parser."""

from __future__ import annotations

import json

import msgpack
import pytest

from heraldpush import wire
from heraldpush.backoff import Backoff, Reconnects, full_jitter


def test_cursors_compare_within_an_epoch_only() -> None:
    assert wire.parse_cursor("9f86d081884c7d65-42") == wire.Cursor("9f86d081884c7d65", 42)
    assert wire.parse_cursor("00ab-007") == wire.Cursor("ab", 7)
    assert wire.parse_cursor("xyz-1") is None and wire.parse_cursor("ab-") is None
    assert wire.is_after("ab-10", "ab-9") and not wire.is_after("ab-9", "ab-9")
    assert not wire.is_after("ab-8", "ab-9")
    assert wire.is_after("cd-1", "ab-9"), "another epoch: the server signals the loss, the client delivers"
    assert wire.is_after("ab-1", None)
    # Sequence numbers past 2**53 keep their order.
    assert wire.is_after("ab-18446744073709551615", "ab-18446744073709551614")


def test_resume_lists_round_trip_and_skip_garbage() -> None:
    text = "a=ab-1,b.c=cd-22, bad topic=ab-1,x=nocursor,=ab-1"
    assert wire.parse_resume_list(text) == {"a": "ab-1", "b.c": "cd-22"}
    assert wire.format_resume_list([("a", "ab-1"), ("b", None), ("c", "cd-2")]) == "a=ab-1,c=cd-2"


@pytest.mark.parametrize("pattern,topic,matches", [
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders.eu.paris", True),
    ("orders.*", "orders", False),
    ("orders.*", "ordersx.eu", False),
    ("orders.*", "orders.eu:x", False),
    ("chat:*", "chat:room1", True),
    ("chat:*", "chat:room:1", True),
])
def test_patterns_match_within_their_namespace(pattern: str, topic: str, matches: bool) -> None:
    assert wire.matches_pattern(pattern, topic) is matches


@pytest.mark.parametrize("name,ok", [
    ("orders.*", True), ("chat:*", True), ("*", False), ("orders*", False), ("a.*.b", False),
    ("user:*", False), ("conn:*", False), ("news", True), ("bad topic", False),
])
def test_pattern_errors(name: str, ok: bool) -> None:
    assert (wire.pattern_error(name) is None) is ok


def test_ws_frames_decode_in_both_formats() -> None:
    frame = {"type": "message", "topic": "a", "id": "ab-3", "event": "e", "data": {"n": 1}}
    for raw, fmt in ((json.dumps(frame), "json"), (msgpack.packb(frame), "msgpack")):
        ev = wire.decode_ws_frame(raw, fmt)  # type: ignore[arg-type]
        assert ev == wire.Message("a", "ab-3", {"n": 1}, "e")
    assert wire.decode_ws_frame('{"type":"lost","topic":"a","reason":"expired"}', "json") == wire.Lost("a", "expired")
    opened = wire.decode_ws_frame('{"type":"subscribed","topics":["a"],"cursors":{"a":"ab-0"}}', "json")
    assert opened == wire.Opened({"a": "ab-0"})
    server = wire.decode_ws_frame('{"type":"subscribed","topics":["s"],"cursors":{},"by":"server"}', "json")
    assert isinstance(server, wire.ServerSubscribed) and server.topics == ("s",)


@pytest.mark.parametrize("raw,fmt", [
    ('{"type":"message","topic":', "json"),          # truncated
    ("[1,2]", "json"),                                 # not an object
    ('{"type":"message","topic":"a","id":"nope","data":1}', "json"),  # id is not a cursor
    ('{"type":"message","topic":"a","id":"ab-1"}', "json"),           # no data
    (b"\x81", "json"),                                 # binary on a JSON connection
    ('{"type":"message"}', "msgpack"),                 # text on a msgpack connection
    (b"\xc1", "msgpack"),                              # not MessagePack
])
def test_malformed_frames_are_protocol_errors(raw: str | bytes, fmt: str) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.decode_ws_frame(raw, fmt)  # type: ignore[arg-type]


def test_sse_parser_survives_any_split() -> None:
    stream = ("retry: 3000\nid: a=ab-0\n\n: ping\n\n"
              'id: a=ab-1\ndata: {"type":"message","topic":"a","id":"ab-1","data":"é✓"}\n\n'
              'id: a=ab-2\r\nevent: herald.lost\r\ndata: {"topic":"a","reason":"expired"}\r\n\r\n'
              'event: herald.shutdown\rdata: {"reason":"shutdown","retry_ms":1200}\r\r')
    expected = None
    for size in (1, 2, 3, 7, 64, len(stream)):
        parser = wire.SseParser()
        events: list[wire.WireEvent] = []
        for i in range(0, len(stream), size):
            for block in parser.feed(stream[i:i + size]):
                events.extend(wire.decode_sse_block(block))
        if expected is None:
            expected = events
        assert events == expected, f"chunks of {size}"
    assert expected is not None
    assert expected[0] == wire.Opened({"a": "ab-0"})
    assert expected[1] == wire.Message("a", "ab-1", "é✓")
    assert expected[2] == wire.Lost("a", "expired", "ab-2")
    assert expected[-1] == wire.Ended("the node is draining", shutdown=True, retry_ms=1200)


def test_sse_lines_are_bounded() -> None:
    parser = wire.SseParser(max_line=100)
    with pytest.raises(wire.ProtocolError):
        list(parser.feed("data: " + "x" * 200))


def test_poll_answers() -> None:
    body = json.dumps({"messages": [{"type": "message", "topic": "a", "id": "ab-5", "data": 1}],
                       "lost": [{"topic": "a", "reason": "expired"}, {"topic": "b", "reason": "epoch"}],
                       "cursor": "a=ab-5,b=cd-0", "more": False,
                       "disconnect": {"reason": "banned", "reconnect": False}}).encode()
    a = wire.decode_poll_answer(body)
    assert a.messages == (wire.Message("a", "ab-5", 1),)
    # A loss with messages goes on from them; without, from the cursor.
    assert a.lost == (wire.Lost("a", "expired", None), wire.Lost("b", "epoch", "cd-0"))
    assert a.ended == wire.Ended("banned", reconnect=False)
    with pytest.raises(wire.ProtocolError):
        wire.decode_poll_answer(b"<html>")


def test_backoff_is_jittered_and_bounded() -> None:
    b = Backoff(0.5, 4.0)
    assert full_jitter(0, b, lambda: 0.999) < 0.5
    assert full_jitter(10, b, lambda: 0.999) < 4.0
    assert full_jitter(3, b, lambda: 0.0) == 0.0


def test_failures_move_to_the_next_url_then_transport() -> None:
    r = Reconnects(urls=2, transports=3, backoff=Backoff(0.1, 1), rand=lambda: 0.5)
    r.closed(0, stable=False, shutdown=False, retry_after=None)
    assert (r.url, r.transport) == (1, 0)
    r.closed(0, stable=False, shutdown=False, retry_after=None)
    assert (r.url, r.transport) == (0, 1)
    # A stable connection that ends reconnects on the same URL and transport.
    r.closed(1, stable=True, shutdown=False, retry_after=None)
    assert (r.url, r.transport) == (0, 1)
    assert r.closed(1, stable=False, shutdown=True, retry_after=2.0) == 2.0
