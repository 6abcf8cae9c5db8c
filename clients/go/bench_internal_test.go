package heraldpush

// Benchmarks of the WebSocket receive path without the network: frames go through
// wsConn.receive (decoding, bases, the store's cursors, the Events channel) as the read loop
// hands them over, while a goroutine drains Events as an application would. One op is one
// message, whatever the frames carry, so ns/op and allocs/op compare single frames with
// batches directly. BenchmarkLoopback does it over a real WebSocket.
//
//	go test -run '^$' -bench 'Receive|Loopback' -benchmem -cpuprofile cpu.out

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"
	"github.com/vmihailenco/msgpack/v5"
)

const benchRing = 1000 // messages e-1..e-1000 of topic a, played again and again

func benchPayload(n int) map[string]any {
	return map[string]any{"n": n, "text": "hello world", "price": 12.5, "tags": []any{"a", "b"}, "ok": true}
}

func benchMessage(n int) map[string]any {
	return map[string]any{"type": "message", "topic": "a", "id": fmt.Sprintf("e-%d", n), "data": benchPayload(n)}
}

// benchFrames: the ring's messages, per frames of size (1: each alone).
func benchFrames(b *testing.B, mp bool, size int) [][]byte {
	return framesOf(b, mp, size, benchRing)
}

// framesOf: messages 1..count, per frames of size (1: each alone), JSON or MessagePack.
func framesOf(b *testing.B, mp bool, size, count int) [][]byte {
	var out [][]byte
	for first := 1; first <= count; first += size {
		var items []any
		for n := first; n < first+size && n <= count; n++ {
			items = append(items, benchMessage(n))
		}
		var v any = items
		if size == 1 {
			v = items[0]
		}
		var (
			f   []byte
			err error
		)
		if mp {
			f, err = msgpack.Marshal(v)
		} else {
			f, err = json.Marshal(v)
		}
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// benchConn is a connection of a client subscribed to topic a, its events drained.
func benchConn(mp bool) (*wsConn, *Client, func()) {
	opts := Options{URLs: []string{"http://127.0.0.1:1"}, Topics: []string{"a"}, MsgPack: mp}
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{opts: opts, store: newStore(opts.Topics, nil), tokens: &tokens{}, ctx: ctx, cancel: cancel,
		events: make(chan Event, opts.EventBuffer)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range c.events {
			if m, ok := ev.(*Message); ok && len(m.Data) == 0 {
				panic("no data")
			}
		}
	}()
	w := newWSConn(&link{c: c, h: &handle{transport: WebSocket}})
	w.requested["a"] = true
	return w, c, func() { cancel(); close(c.events); <-done }
}

func BenchmarkReceive(b *testing.B) {
	for _, mp := range []bool{false, true} {
		format, typ := "json", websocket.MessageText
		if mp {
			format, typ = "msgpack", websocket.MessageBinary
		}
		for _, size := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("%s/%d", format, size), func(b *testing.B) {
				frames := benchFrames(b, mp, size)
				w, c, stop := benchConn(mp)
				defer stop()
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for sent := 0; sent < b.N; {
					for _, f := range frames {
						if err := w.receive(ctx, typ, f); err != nil {
							b.Fatal(err)
						}
					}
					sent += benchRing
					c.store.mu.Lock()
					delete(c.store.cursors, "a") // the ring again
					c.store.mu.Unlock()
				}
			})
		}
	}
}

// BenchmarkLoopback: the same messages over a real WebSocket on loopback, read by a Client
// and drained from Events: one op is one message, the gateway's side (a fake writing
// prepared frames) included. Per-frame costs (a read, a wake-up) show here.
func BenchmarkLoopback(b *testing.B) {
	for _, mp := range []bool{false, true} {
		format := "json"
		if mp {
			format = "msgpack"
		}
		for _, size := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("%s/%d", format, size), func(b *testing.B) { benchLoopback(b, mp, size) })
		}
	}
}

func benchLoopback(b *testing.B, mp bool, size int) {
	typ := websocket.MessageText
	if mp {
		typ = websocket.MessageBinary
	}
	frames := framesOf(b, mp, size, b.N)
	start := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts := &websocket.AcceptOptions{}
		if mp {
			opts.Subprotocols = []string{"herald.msgpack"}
		}
		ws, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		if _, _, err := ws.Read(ctx); err != nil {
			return
		}
		sub := map[string]any{"type": "subscribed", "topics": []string{"a"}, "cursors": map[string]string{"a": "e-0"}}
		var sb []byte
		if mp {
			sb, _ = msgpack.Marshal(sub)
		} else {
			sb, _ = json.Marshal(sub)
		}
		_ = ws.Write(ctx, typ, sb)
		select {
		case <-start:
		case <-ctx.Done():
			return
		}
		for _, f := range frames {
			if ws.Write(ctx, typ, f) != nil {
				return
			}
		}
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c, err := New(Options{URLs: []string{srv.URL}, Topics: []string{"a"}, MsgPack: mp, Transports: []Transport{WebSocket}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for ev := range c.Events() {
		if s, ok := ev.(*StateChange); ok && s.State == StateConnected {
			break
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	close(start)
	for got := 0; got < b.N; {
		switch ev := (<-c.Events()).(type) {
		case *Message:
			got++
		case *ErrorEvent:
			b.Fatal(ev.Err)
		}
	}
	b.StopTimer()
}
