package heraldpush_test

// Unit tests against fakes of the gateway (net/http/httptest): what a real Herald does not do
// on demand (malformed frames, silence, refusals, transports blocked by a proxy).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

var fast = heraldpush.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}

func isError(ev heraldpush.Event, substr string) bool {
	e, ok := ev.(*heraldpush.ErrorEvent)
	return ok && strings.Contains(e.Err.Error(), substr)
}

// A malformed WebSocket frame is an error event and a new connection that resumes from the
// cursor held; never a panic.
func TestFakeMalformedWebSocketFrame(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var conns atomic.Int32
	subscribes := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		n := conns.Add(1)
		ctx := r.Context()
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		subscribes <- string(b)
		_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribed","topics":["t"],"cursors":{"t":"e-0"}}`))
		if n == 1 {
			_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"message","topic":"t","id":"e-1","data":1}`))
			_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"message","topic":`))
		} else {
			_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"message","topic":"t","id":"e-1","data":1}`)) // a duplicate
			_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"message","topic":"t","id":"e-2","data":2}`))
		}
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
	if m := ev.message(5 * time.Second); m.ID != "e-1" {
		t.Fatal(m.ID)
	}
	ev.next(5*time.Second, "the malformed frame's error", func(e heraldpush.Event) bool { return isError(e, "malformed") })
	if m := ev.message(5 * time.Second); m.ID != "e-2" {
		t.Fatalf("after the reconnect: %s (the duplicate must be dropped)", m.ID)
	}
	<-subscribes
	if second := <-subscribes; second != `{"type":"subscribe","topics":["t"],"cursors":{"t":"e-1"}}` {
		t.Fatalf("the second subscribe: %s", second)
	}
	closeClient(t, c, ev)
}

// sseFake serves /v1/sse with handler, recording each request.
type sseFake struct {
	mu       sync.Mutex
	requests []*http.Request
}

func (f *sseFake) record(r *http.Request) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
	return len(f.requests)
}

func (f *sseFake) request(i int) *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[i]
}

func sseWrite(w http.ResponseWriter, s string) {
	_, _ = w.Write([]byte(s))
	w.(http.Flusher).Flush()
}

// A stream from which nothing comes (no heartbeat) is dead: the client makes another, from
// its cursors; heartbeats keep a quiet stream alive.
func TestFakeSSEMissedHeartbeats(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fake := &sseFake{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := fake.record(r)
		w.Header().Set("content-type", "text/event-stream")
		sseWrite(w, "retry: 3000\nid: t=e-0\n\n")
		switch n {
		case 1:
			sseWrite(w, "id: t=e-1\ndata: {\"type\":\"message\",\"topic\":\"t\",\"id\":\"e-1\",\"data\":\"one\"}\n\n")
			<-r.Context().Done() // silence
		default:
			// Heartbeats only, for longer than the timeout.
			for i := 0; i < 100; i++ {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(300 * time.Millisecond):
					sseWrite(w, ": ping\n\n")
				}
			}
		}
	}))
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{
		URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{heraldpush.SSE},
		Backoff: fast, HeartbeatTimeout: time.Second,
	})
	if m := ev.message(5 * time.Second); m.ID != "e-1" || string(m.Data) != `"one"` {
		t.Fatalf("%+v", m)
	}
	start := time.Now()
	ev.next(6*time.Second, "the dead stream's error", func(e heraldpush.Event) bool { return isError(e, "heartbeat") })
	if d := time.Since(start); d < 2*time.Second || d > 4*time.Second {
		t.Fatalf("the silence was noticed after %v, want about 2.25 s", d)
	}
	ev.connected(5*time.Second, heraldpush.SSE)
	second := fake.request(1)
	if got := second.Header.Get("last-event-id"); got != "t=e-1" {
		t.Fatalf("resumed from %q", got)
	}
	if q := second.URL.Query(); q.Get("heartbeat") != "1" || q.Get("format") != "json" || q.Get("topic") != "t" {
		t.Fatalf("query %v", q)
	}
	// Three seconds of heartbeats: the stream stays.
	select {
	case e := <-c.Events():
		t.Fatalf("a stream with heartbeats: %s", describe(e))
	case <-time.After(3 * time.Second):
	}
	closeClient(t, c, ev)
}

// The transports fall back one by one when a proxy refuses them; long-poll delivers the loss
// signal before the batch, and a malformed answer is an error and a new poll.
func TestFakeFallbackToPoll(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var polls atomic.Int32
	var cursors sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/ws", "/v1/sse":
			http.Error(w, "blocked by the proxy", http.StatusBadGateway)
			return
		case "/v1/poll":
		default:
			http.NotFound(w, r)
			return
		}
		n := polls.Add(1)
		cursors.Store(n, r.URL.Query().Get("cursor"))
		w.Header().Set("content-type", "application/json")
		switch n {
		case 1:
			_, _ = w.Write([]byte(`{"messages":[],"lost":[],"cursor":"t=e-3","more":false}`))
		case 2:
			_, _ = w.Write([]byte(`{"messages":[{"type":"message","topic":"t","id":"f-1","data":{"a":1}}],"lost":[{"topic":"t","reason":"epoch"}],"cursor":"t=f-1","more":false}`))
		case 3:
			_, _ = w.Write([]byte(`{"messages":[`))
		default:
			select {
			case <-r.Context().Done():
			case <-time.After(200 * time.Millisecond):
				_, _ = w.Write([]byte(`{"messages":[],"lost":[],"cursor":"t=f-1","more":false}`))
			}
		}
	}))
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, Backoff: fast, UpgradeInterval: time.Hour})
	ev.connected(5*time.Second, heraldpush.LongPoll)
	l := ev.lost(5 * time.Second)
	if l.Topic != "t" || l.Reason != "epoch" {
		t.Fatalf("%+v", l)
	}
	if m := ev.message(5 * time.Second); m.ID != "f-1" {
		t.Fatal(m.ID)
	}
	ev.next(5*time.Second, "the malformed answer's error", func(e heraldpush.Event) bool { return isError(e, "malformed") })
	// Made again (ws and sse still refused), from the cursor after the loss and the batch.
	ev.connected(5*time.Second, heraldpush.LongPoll)
	closeClient(t, c, ev)
	for n, want := range map[int32]string{1: "", 2: "t=e-3", 4: "t=f-1"} {
		if got, _ := cursors.Load(n); got != want {
			t.Errorf("poll %d sent cursor %q, want %q", n, got, want)
		}
	}
}

// A connection that never answers is given up after OpenTimeout, and Close ends everything
// at once, even in the middle of an attempt.
func TestFakeCloseWhileConnecting(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE, heraldpush.LongPoll} {
		// The open timeout bounds an attempt, whatever the heartbeat timeout.
		c, ev := newClient(t, heraldpush.Options{URLs: []string{"http://" + ln.Addr().String()}, Topics: []string{"t"}, Transports: []heraldpush.Transport{tr}, Backoff: fast, OpenTimeout: 300 * time.Millisecond, HeartbeatTimeout: time.Minute})
		ev.next(2*time.Second, string(tr)+": the attempt's failure", func(e heraldpush.Event) bool { return isError(e, "did not open in time") })
		time.Sleep(20 * time.Millisecond) // the next attempt is under way
		closeClient(t, c, ev)
		if _, err := c.Publish(context.Background(), "t", 1); !errors.Is(err, heraldpush.ErrClosed) {
			t.Fatalf("publish after close: %v", err)
		}
	}
}

// invalid_token: one fresh token from TokenFunc, then the refusal is final. forbidden is
// final at once: the client closes and says why.
func TestFakeRefusals(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		switch r.Header.Get("authorization") {
		case "Bearer good":
			ws, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer ws.CloseNow()
			_ = ws.Write(r.Context(), websocket.MessageText, []byte(`{"type":"subscribed","topics":["t"],"cursors":{"t":"e-0"}}`))
			_, _, _ = ws.Read(r.Context())
			_, _, _ = ws.Read(r.Context())
		case "Bearer forbidden":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"code":"forbidden","reason":"not yours"}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":"invalid_token","reason":"expired"}`))
		}
	}))
	defer srv.Close()
	var calls atomic.Int32
	c, ev := newClient(t, heraldpush.Options{
		URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast,
		TokenFunc: func(context.Context) (string, error) {
			if calls.Add(1) == 1 {
				return "stale", nil
			}
			return "good", nil
		},
	})
	ev.connected(5*time.Second, heraldpush.WebSocket)
	if calls.Load() != 2 {
		t.Fatalf("token asked %d times", calls.Load())
	}
	closeClient(t, c, ev)

	c, ev = newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast, Token: "forbidden"})
	e := ev.next(5*time.Second, "the refusal", func(e heraldpush.Event) bool { _, ok := e.(*heraldpush.ErrorEvent); return ok }).(*heraldpush.ErrorEvent)
	var refused *heraldpush.Error
	if !errors.As(e.Err, &refused) || refused.Code != "forbidden" || refused.Status != 403 || refused.Reason != "not yours" {
		t.Fatalf("%v", e.Err)
	}
	ev.next(5*time.Second, "closed", func(e heraldpush.Event) bool {
		s, ok := e.(*heraldpush.StateChange)
		return ok && s.State == heraldpush.StateClosed
	})
	ev.drain(2 * time.Second) // the channel closes by itself
	if s, _ := c.State(); s != heraldpush.StateClosed {
		t.Fatal(s)
	}
	_ = c.Close()
}

// Close codes: 1012 (restarting) reconnects, 4001 (the application said stay away) ends.
func TestFakeCloseCodes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, _, err := ws.Read(ctx); err != nil {
			return
		}
		_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribed","topics":["t"],"cursors":{"t":"e-0"}}`))
		if conns.Add(1) == 1 {
			_ = ws.Close(websocket.StatusServiceRestart, "restarting")
		} else {
			_ = ws.Close(4001, "banned")
		}
	}))
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
	e := ev.next(5*time.Second, "1012", func(e heraldpush.Event) bool { return isError(e, "1012") }).(*heraldpush.ErrorEvent)
	var ce *heraldpush.CloseError
	if !errors.As(e.Err, &ce) || ce.Code != 1012 || ce.Reason != "restarting" {
		t.Fatalf("%v", e.Err)
	}
	ev.next(5*time.Second, "4001", func(e heraldpush.Event) bool { return isError(e, "4001 banned") })
	ev.drain(5 * time.Second)
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections", n)
	}
	_ = c.Close()
}

// Publishing over the WebSocket: replies matched in order, refusals as *Error.
func TestFakeWebSocketPublish(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		n := 0
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var f map[string]any
			_ = json.Unmarshal(b, &f)
			switch f["type"] {
			case "subscribe":
				_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribed","topics":["t"],"cursors":{"t":"e-0"}}`))
			case "publish":
				n++
				if f["topic"] == "no" {
					_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"error","code":"forbidden","reason":"no publish claim"}`))
				} else {
					_ = ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"type":"published","topic":%q,"id":"e-%d"}`, f["topic"], n)))
				}
			}
		}
	}))
	defer srv.Close()
	c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
	ev.connected(5*time.Second, heraldpush.WebSocket)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			topic := "t"
			if i%5 == 0 {
				topic = "no"
			}
			r, err := c.Publish(ctxT(t, 5*time.Second), topic, i)
			var refused *heraldpush.Error
			switch {
			case topic == "no" && !(errors.As(err, &refused) && refused.Code == "forbidden"):
				errs <- fmt.Errorf("refused publish: %v", err)
			case topic == "t" && (err != nil || r.Topic != "t" || !strings.HasPrefix(r.ID, "e-")):
				errs <- fmt.Errorf("publish: %+v %v", r, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	closeClient(t, c, ev)
}

// An application that stops reading: the connection waits (bounded), the gateway's silence
// is not declared meanwhile (on any transport), and Close still ends everything at once.
func TestFakeUnreadEventsThenClose(t *testing.T) {
	message := func(i int) string {
		return fmt.Sprintf(`{"type":"message","topic":"t","id":"e-%d","data":%d}`, i, i)
	}
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE, heraldpush.LongPoll} {
		t.Run(string(tr), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var sent sync.Once
			sentCh := make(chan struct{})
			var polls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				switch tr {
				case heraldpush.WebSocket:
					ws, err := websocket.Accept(w, r, nil)
					if err != nil {
						return
					}
					defer ws.CloseNow()
					if _, _, err := ws.Read(ctx); err != nil {
						return
					}
					_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribed","topics":["t"],"cursors":{"t":"e-0"}}`))
					for i := 1; i <= 100; i++ {
						if ws.Write(ctx, websocket.MessageText, []byte(message(i))) != nil {
							return
						}
					}
					sent.Do(func() { close(sentCh) })
					for {
						if _, _, err := ws.Read(ctx); err != nil {
							return
						}
					}
				case heraldpush.SSE:
					w.Header().Set("content-type", "text/event-stream")
					sseWrite(w, "id: t=e-0\n\n")
					for i := 1; i <= 100; i++ {
						sseWrite(w, fmt.Sprintf("id: t=e-%d\ndata: %s\n\n", i, message(i)))
					}
					sent.Do(func() { close(sentCh) })
					<-ctx.Done()
				default:
					w.Header().Set("content-type", "application/json")
					switch polls.Add(1) {
					case 1:
						_, _ = w.Write([]byte(`{"messages":[],"lost":[],"cursor":"t=e-0"}`))
					case 2:
						var ms []string
						for i := 1; i <= 100; i++ {
							ms = append(ms, message(i))
						}
						_, _ = w.Write([]byte(`{"messages":[` + strings.Join(ms, ",") + `],"lost":[],"cursor":"t=e-100"}`))
						sent.Do(func() { close(sentCh) })
					default:
						<-ctx.Done()
					}
				}
			}))
			defer srv.Close()
			c, err := heraldpush.New(heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"t"}, Transports: []heraldpush.Transport{tr}, EventBuffer: 4, HeartbeatTimeout: 400 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-sentCh:
			case <-time.After(5 * time.Second):
				t.Fatal("the fake could not send")
			}
			// Longer than any dead-connection timeout here (SSE: 2.25 s), nothing read.
			time.Sleep(3 * time.Second)
			// The first events are the first messages, in order, on the first connection.
			want := []string{"state connecting " + string(tr), "state connected " + string(tr), "message t e-1 1", "message t e-2 2"}
			for i, w := range want {
				if got := describe(<-c.Events()); got != w {
					t.Fatalf("event %d: %s, want %s", i, got, w)
				}
			}
			start := time.Now()
			_ = c.Close()
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Close took %v", d)
			}
			n := 0
			for e := range c.Events() {
				if e, ok := e.(*heraldpush.ErrorEvent); ok {
					t.Fatalf("an error while the application was not reading: %v", e.Err)
				}
				n++
			}
			if n > 8 {
				t.Fatalf("%d events buffered, with EventBuffer 4", n)
			}
		})
	}
}
