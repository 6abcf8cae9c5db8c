package heraldpush_test

// WebSocket batch frames (docs/protocol.md "Batch frames") against fakes of the gateway: the
// client asks for them (batch=1, and no permessage-deflate) unless told not to; a JSON array
// or a MessagePack array of frames is read element by element, each exactly as if it had come
// alone (cursors, duplicates, loss signals, deltas against the element before); an element
// that is not an object is a malformed frame (those before it delivered, then an error and a
// new connection from the cursors).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

// wsFake is a gateway (closed by the test, before goleak looks) that answers the first subscribe of each connection with `subscribed`,
// then plays script (n: the connection, from 1). send takes a frame as a value (JSON, or
// MessagePack with sorted keys), or as raw text ([]byte, JSON only).
type wsFake struct {
	mu         sync.Mutex
	queries    []string
	extensions []string
	subscribes []map[string]any
}

func (f *wsFake) start(t *testing.T, mp bool, script func(n int, send func(v any))) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts := &websocket.AcceptOptions{}
		if mp {
			opts.Subprotocols = []string{"herald.msgpack"}
		}
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.extensions = append(f.extensions, r.Header.Get("Sec-WebSocket-Extensions"))
		n := len(f.queries)
		f.mu.Unlock()
		ws, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		send := func(v any) {
			switch {
			case mp:
				_ = ws.Write(ctx, websocket.MessageBinary, sortedMsgpack(v))
			case reflect.TypeOf(v) == reflect.TypeOf([]byte(nil)):
				_ = ws.Write(ctx, websocket.MessageText, v.([]byte))
			default:
				_ = ws.Write(ctx, websocket.MessageText, jsonOf(v))
			}
		}
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var sub map[string]any
		if mp {
			_ = msgpack.Unmarshal(b, &sub)
		} else {
			_ = json.Unmarshal(b, &sub)
		}
		f.mu.Lock()
		f.subscribes = append(f.subscribes, sub)
		f.mu.Unlock()
		start := "e-0"
		if cs, ok := sub["cursors"].(map[string]any); ok && cs["t"] != nil {
			start = fmt.Sprint(cs["t"])
		}
		send(map[string]any{"type": "subscribed", "topics": sub["topics"], "cursors": map[string]any{"t": start}})
		script(n, send)
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}))
	return srv
}

func msg(n int) map[string]any {
	return map[string]any{"type": "message", "topic": "t", "id": fmt.Sprintf("e-%d", n), "data": map[string]any{"n": n}}
}

// messages reads messages (and loss signals, as "lost:<reason>") until want has as many, and
// compares.
func wantEvents(t *testing.T, ev *events, want ...string) {
	t.Helper()
	var got []string
	for len(got) < len(want) {
		e := ev.next(5*time.Second, fmt.Sprintf("event %d of %v", len(got)+1, want), func(e heraldpush.Event) bool {
			switch e.(type) {
			case *heraldpush.Message, *heraldpush.Lost:
				return true
			}
			return false
		})
		switch e := e.(type) {
		case *heraldpush.Message:
			var d struct{ N int }
			if err := e.Decode(&d); err != nil || e.ID != fmt.Sprintf("e-%d", d.N) {
				t.Fatalf("message %s with data %s", e.ID, e.Data)
			}
			got = append(got, e.ID)
		case *heraldpush.Lost:
			got = append(got, "lost:"+e.Reason)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestBatchFrames(t *testing.T) {
	for _, mp := range []bool{false, true} {
		t.Run(fmt.Sprintf("msgpack=%v", mp), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var fake wsFake
			srv := fake.start(t, mp, func(n int, send func(any)) {
				// A duplicate inside a batch is dropped; a loss signal inside one applies
				// where it stands; an empty batch is nothing.
				send([]any{msg(1), msg(2), msg(2), map[string]any{"type": "lost", "topic": "t", "reason": "lagged"}, msg(5)})
				send(msg(6))
				send([]any{})
				send([]any{msg(7)})
			})
			defer srv.Close()
			c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, MsgPack: mp,
				Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
			wantEvents(t, ev, "e-1", "e-2", "lost:lagged", "e-5", "e-6", "e-7")
			deadline := time.Now().Add(5 * time.Second)
			for c.Stats().Batches != 3 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if s := c.Stats(); s.Batches != 3 || s.Deltas != 0 {
				t.Fatalf("stats %+v, want 3 batches", s)
			}
			if c.Cursor("t") != "e-7" {
				t.Fatalf("cursor %s", c.Cursor("t"))
			}
			closeClient(t, c, ev)
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if fake.queries[0] != "batch=1" || fake.extensions[0] != "" {
				t.Fatalf("asked with %q, extensions %q: want batch=1 and no permessage-deflate", fake.queries[0], fake.extensions[0])
			}
		})
	}
}

// A JSON batch as text the gateway may write it (whitespace between elements, strings that
// hold brackets and commas).
func TestBatchFramesJSONText(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var fake wsFake
	srv := fake.start(t, false, func(n int, send func(any)) {
		send([]byte(" [ {\"type\":\"message\",\"topic\":\"t\",\"id\":\"e-1\",\"event\":\"],[{\\\"\",\"data\":{\"n\":1,\"s\":\"}]\"}} ,\n" +
			"{\"type\":\"message\",\"topic\":\"t\",\"id\":\"e-2\",\"data\":{\"n\":2}}\t] "))
	})
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"},
		Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
	m := ev.message(5 * time.Second)
	if m.ID != "e-1" || m.Event != `],[{"` || string(m.Data) != `{"n":1,"s":"}]"}` {
		t.Fatalf("%+v", m)
	}
	if m = ev.message(5 * time.Second); m.ID != "e-2" || string(m.Data) != `{"n":2}` {
		t.Fatalf("%+v", m)
	}
	closeClient(t, c, ev)
}

// Deltas inside batches apply against the element before (in the same batch or the one
// before): a full element's base is its own data.
func TestBatchDeltas(t *testing.T) {
	for _, mp := range []bool{false, true} {
		t.Run(fmt.Sprintf("msgpack=%v", mp), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			data := func(n int) []byte {
				if mp {
					return sortedMsgpack(state(n))
				}
				return jsonOf(state(n))
			}
			full := func(n int) map[string]any {
				return map[string]any{"type": "message", "topic": "a", "id": fmt.Sprintf("e-%d", n), "data": state(n)}
			}
			delta := func(n int) map[string]any {
				d := makeDelta(data(n-1), data(n))
				var payload any = string(d)
				if mp {
					payload = d
				}
				return map[string]any{"type": "message", "topic": "a", "id": fmt.Sprintf("e-%d", n), "delta": true, "data": payload}
			}
			var fake wsFake
			srv := fake.start(t, mp, func(n int, send func(any)) {
				if mp {
					send([]any{full(1), delta(2), delta(3)})
				} else {
					// As text: the elements apart, so that a base read from the whole frame
					// would be wrong.
					var parts []string
					for _, f := range []map[string]any{full(1), delta(2), delta(3)} {
						parts = append(parts, string(jsonOf(f)))
					}
					send([]byte("[" + strings.Join(parts, " ,\n ") + "]"))
				}
				send([]any{delta(4), full(5), delta(6)})
			})
			defer srv.Close()
			c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"a"}, Delta: heraldpush.DeltaFossil,
				MsgPack: mp, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
			for n := 1; n <= 6; n++ {
				m := ev.next(5*time.Second, fmt.Sprintf("message %d", n), func(e heraldpush.Event) bool {
					if e, ok := e.(*heraldpush.ErrorEvent); ok {
						t.Fatalf("error: %v", e.Err)
					}
					_, ok := e.(*heraldpush.Message)
					return ok
				}).(*heraldpush.Message)
				var got map[string]any
				_ = m.Decode(&got)
				if m.ID != fmt.Sprintf("e-%d", n) || !reflect.DeepEqual(got, jsonRound(state(n))) {
					t.Fatalf("message %d: %s %s", n, m.ID, m.Data)
				}
			}
			if s := c.Stats(); s.Deltas != 4 || s.DeltaFailures != 0 || s.Batches != 2 {
				t.Fatalf("stats %+v", s)
			}
			closeClient(t, c, ev)
		})
	}
}

// An element that is not an object (map) is a malformed frame: the elements before it are
// delivered, then an error event, and the connection is made again from the cursors.
func TestBatchMalformedElement(t *testing.T) {
	for _, tc := range []struct {
		name string
		mp   bool
		bad  any
	}{
		{"json number", false, []any{msg(1), 5, msg(2)}},
		{"json broken", false, []byte(`[{"type":"message","topic":"t","id":"e-1","data":{"n":1}},{"type":"message","topic":]`)},
		{"json unterminated", false, []byte(`[{"type":"message","topic":"t","id":"e-1","data":{"n":1}},`)},
		{"msgpack number", true, []any{msg(1), 5, msg(2)}},
		{"msgpack string", true, []any{msg(1), "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var fake wsFake
			srv := fake.start(t, tc.mp, func(n int, send func(any)) {
				if n == 1 {
					send(tc.bad)
					return
				}
				send([]any{msg(1), msg(2)}) // e-1 again: a duplicate
				send([]any{msg(3)})
			})
			defer srv.Close()
			c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, MsgPack: tc.mp,
				Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
			if m := ev.message(5 * time.Second); m.ID != "e-1" {
				t.Fatal(m.ID)
			}
			ev.next(5*time.Second, "the malformed batch's error", func(e heraldpush.Event) bool { return isError(e, "malformed") })
			wantEvents(t, ev, "e-2", "e-3")
			closeClient(t, c, ev)
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if len(fake.subscribes) < 2 || fmt.Sprint(fake.subscribes[1]["cursors"]) != "map[t:e-1]" {
				t.Fatalf("subscribes %v", fake.subscribes)
			}
		})
	}
}

// NoBatch: batch frames are not asked for. Compression: permessage-deflate is offered only
// when asked.
func TestBatchOff(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var fake wsFake
	srv := fake.start(t, false, func(n int, send func(any)) {
		send(msg(1))
		send(msg(2))
	})
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, NoBatch: true, Compression: true,
		Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
	wantEvents(t, ev, "e-1", "e-2")
	if s := c.Stats(); s.Batches != 0 {
		t.Fatalf("stats %+v", s)
	}
	closeClient(t, c, ev)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.queries[0] != "" || !strings.Contains(fake.extensions[0], "permessage-deflate") {
		t.Fatalf("asked with %q, extensions %q", fake.queries[0], fake.extensions[0])
	}
}
