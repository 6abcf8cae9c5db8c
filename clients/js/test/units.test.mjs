// Unit tests of the pieces without I/O: cursors, resume lists, the SSE parser, backoff.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  parseCursor, isAfter, parseResumeList, formatResumeList, isTopicName, fullJitter, SseParser, tokenExpiry,
} from "../dist/herald.js";

test("cursors parse and compare as numbers, not text", () => {
  assert.deepEqual(parseCursor("9f86d081884c7d65-42"), { epoch: "9f86d081884c7d65", seq: "42" });
  assert.equal(parseCursor("9F-1"), undefined, "upper-case hex is not a cursor");
  assert.equal(parseCursor("ab"), undefined);
  assert.equal(parseCursor("ab-"), undefined);
  assert.equal(parseCursor("ab-1-2"), undefined);
  assert.ok(isAfter("ab-10", "ab-9"), "10 > 9 although '10' < '9' as text");
  assert.ok(!isAfter("ab-9", "ab-10"));
  assert.ok(!isAfter("ab-7", "ab-7"), "the same id is a duplicate");
  assert.ok(isAfter("cd-1", "ab-99"), "another epoch is always delivered");
  assert.ok(isAfter("ab-1", undefined));
  assert.ok(isAfter("ab-18446744073709551615", "ab-18446744073709551614"), "beyond 2^53");
  assert.ok(!isAfter("ab-007", "ab-7"), "leading zeros do not fool the comparison");
});

test("resume lists round-trip and skip malformed entries", () => {
  const m = parseResumeList("a=ab-1,b.c=cd-22, bad , =ab-1,x=notacursor,sp ace=ab-1");
  assert.deepEqual([...m], [["a", "ab-1"], ["b.c", "cd-22"]]);
  assert.equal(formatResumeList([["a", "ab-1"], ["b", undefined], ["c", "ef-3"]]), "a=ab-1,c=ef-3");
  assert.ok(isTopicName("user:alice@example.com"));
  assert.ok(!isTopicName("a/b"));
  assert.ok(!isTopicName(""));
  assert.ok(!isTopicName("x".repeat(129)));
});

test("the SSE parser handles any chunking, CR/LF/CRLF, ids without data and retry", () => {
  const text = "retry: 3000\nid: a=ab-0\n\n: ping\n\nid: a=ab-1\r\ndata: {\"x\":1}\r\n\r\nevent: herald.lost\rdata: one\rdata: two\r\r";
  for (let size = 1; size <= text.length; size++) {
    const got = [];
    const p = new SseParser({
      event: (e) => got.push(["event", e.event, e.data, e.id]),
      id: (id) => got.push(["id", id]),
      retry: (ms) => got.push(["retry", ms]),
    });
    for (let i = 0; i < text.length; i += size) p.push(text.slice(i, i + size));
    assert.deepEqual(got, [
      ["retry", 3000],
      ["id", "a=ab-0"],
      ["event", "message", '{"x":1}', "a=ab-1"],
      ["event", "herald.lost", "one\ntwo", undefined],
    ], `chunks of ${size}`);
  }
});

test("the SSE parser bounds a line and an event", () => {
  const p = new SseParser({ event() {} }, 100);
  assert.throws(() => p.push("data: " + "x".repeat(200)), /longer than 100/);
  const q = new SseParser({ event() {} }, 100);
  assert.throws(() => { for (let i = 0; i < 30; i++) q.push("data: xxxxxx\n"); }, /longer than 100/);
});

test("full jitter stays within the exponential bound and the cap", () => {
  const top = () => 0.999999;
  assert.equal(fullJitter(0, { base: 500, max: 30000 }, () => 0), 0);
  assert.ok(fullJitter(0, { base: 500, max: 30000 }, top) < 500);
  assert.ok(fullJitter(3, { base: 500, max: 30000 }, top) < 4000);
  assert.ok(fullJitter(3, { base: 500, max: 30000 }, top) >= 3990);
  assert.ok(fullJitter(40, { base: 500, max: 30000 }, top) < 30000);
  const seen = new Set();
  for (let i = 0; i < 200; i++) seen.add(Math.floor(fullJitter(4, {}, Math.random) / 1000));
  assert.ok(seen.size >= 6, "delays spread over the whole range");
});

test("a JWT's exp is read without verifying it", () => {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  assert.equal(tokenExpiry(`${b64({ alg: "HS256" })}.${b64({ exp: 1700000000, sub: "a" })}.sig`), 1700000000);
  assert.equal(tokenExpiry("not-a-jwt"), undefined);
});
