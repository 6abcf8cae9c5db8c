package heraldpush_test

// Integration tests against a real Herald (herald_test.go starts it).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

// newAdmin is an admin client with an HTTP client of its own, its connections closed when
// the test ends (before the goroutine check).
func newAdmin(t *testing.T, h *herald, key string) (*heraldpush.Admin, func()) {
	t.Helper()
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	a, err := heraldpush.NewAdmin(h.admin, key, hc)
	if err != nil {
		t.Fatal(err)
	}
	return a, hc.CloseIdleConnections
}

func newClient(t *testing.T, opts heraldpush.Options) (*heraldpush.Client, *events) {
	t.Helper()
	c, err := heraldpush.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, watch(t, c)
}

func closeClient(t *testing.T, c *heraldpush.Client, ev *events) {
	t.Helper()
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %v", d)
	}
	ev.drain(time.Second)
}

// Every transport (and MessagePack) delivers in order, with the publish API's ids, and the
// cursor follows.
func TestIntegrationEachTransportDelivers(t *testing.T) {
	h := startHerald(t, "--dev")
	cases := []struct {
		name      string
		transport heraldpush.Transport
		msgpack   bool
		deflate   bool
	}{
		{"ws-json", heraldpush.WebSocket, false, false},
		{"ws-json-deflate", heraldpush.WebSocket, false, true},
		{"ws-msgpack", heraldpush.WebSocket, true, false},
		{"sse", heraldpush.SSE, false, false},
		{"poll", heraldpush.LongPoll, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			admin, done := newAdmin(t, h, "")
			defer done()
			topic := "each." + tc.name
			c, ev := newClient(t, heraldpush.Options{
				URLs: []string{h.public}, Topics: []string{topic},
				Transports: []heraldpush.Transport{tc.transport}, MsgPack: tc.msgpack, Compression: tc.deflate,
			})
			ev.connected(10*time.Second, tc.transport)
			var ids []string
			for i := 0; i < 3; i++ {
				// Over 256 bytes, so that a compressed connection gets compressed frames.
				r, err := admin.PublishEvent(ctxT(t, 5*time.Second), topic, "ev.n", map[string]any{"n": i, "b": "x", "pad": strings.Repeat("p", 400)})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.ID)
			}
			for i := 0; i < 3; i++ {
				m := ev.message(10 * time.Second)
				if m.Topic != topic || m.ID != ids[i] || m.Event != "ev.n" {
					t.Fatalf("message %d: %+v, want id %s", i, m, ids[i])
				}
				var v struct {
					N int    `json:"n"`
					B string `json:"b"`
				}
				if err := m.Decode(&v); err != nil || v.N != i || v.B != "x" {
					t.Fatalf("data %s: %v", m.Data, err)
				}
				if tc.msgpack && len(m.MsgPack) == 0 {
					t.Fatal("no MessagePack payload on a msgpack connection")
				}
			}
			if got := c.Cursor(topic); got != ids[2] {
				t.Fatalf("cursor %q, want %q", got, ids[2])
			}
			closeClient(t, c, ev)
		})
	}
}

// A client resumes from its cursors on another transport: exactly the missed messages.
func TestIntegrationResumeAcrossTransports(t *testing.T) {
	h := startHerald(t, "--dev")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "")
	defer done()
	topic := "resume.a"
	c, ev := newClient(t, heraldpush.Options{URLs: []string{h.public}, Topics: []string{topic}, Transports: []heraldpush.Transport{heraldpush.WebSocket}})
	ev.connected(10*time.Second, heraldpush.WebSocket)
	if _, err := admin.Publish(ctxT(t, 5*time.Second), topic, 1); err != nil {
		t.Fatal(err)
	}
	ev.message(10 * time.Second)
	saved := c.Cursors()
	closeClient(t, c, ev)
	var want []string
	for i := 2; i <= 4; i++ {
		r, err := admin.Publish(ctxT(t, 5*time.Second), topic, i)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.ID)
	}
	for _, tr := range []heraldpush.Transport{heraldpush.SSE, heraldpush.LongPoll} {
		c, ev := newClient(t, heraldpush.Options{URLs: []string{h.public}, Topics: []string{topic}, Cursors: saved, Transports: []heraldpush.Transport{tr}})
		for i, id := range want {
			m := ev.message(10 * time.Second)
			if m.ID != id || string(m.Data) != fmt.Sprint(i+2) {
				t.Fatalf("%s: message %d is %s %s, want %s", tr, i, m.ID, m.Data, id)
			}
		}
		closeClient(t, c, ev)
	}
}

// A cursor of another epoch gets the loss signal, on every transport.
func TestIntegrationLossSignal(t *testing.T) {
	h := startHerald(t, "--dev")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "")
	defer done()
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE, heraldpush.LongPoll} {
		topic := "lost." + string(tr)
		if _, err := admin.Publish(ctxT(t, 5*time.Second), topic, "first"); err != nil {
			t.Fatal(err)
		}
		c, ev := newClient(t, heraldpush.Options{
			URLs: []string{h.public}, Topics: []string{topic}, Transports: []heraldpush.Transport{tr},
			Cursors: map[string]string{topic: "abcdef0123456789-7"},
		})
		l := ev.lost(10 * time.Second)
		if l.Topic != topic || l.Reason != heraldpush.LostEpoch {
			t.Fatalf("%s: %+v", tr, l)
		}
		r, err := admin.Publish(ctxT(t, 5*time.Second), topic, "after")
		if err != nil {
			t.Fatal(err)
		}
		if m := ev.message(10 * time.Second); m.ID != r.ID {
			t.Fatalf("%s: after the loss got %s, want %s", tr, m.ID, r.ID)
		}
		closeClient(t, c, ev)
	}
}

// Prefix patterns deliver every matching topic, and the client keeps their cursors.
func TestIntegrationPattern(t *testing.T) {
	h := startHerald(t, "--dev")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "")
	defer done()
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE} {
		prefix := "pat" + string(tr)
		c, ev := newClient(t, heraldpush.Options{URLs: []string{h.public}, Topics: []string{prefix + ".*"}, Transports: []heraldpush.Transport{tr}})
		ev.connected(10*time.Second, tr)
		ra, _ := admin.Publish(ctxT(t, 5*time.Second), prefix+".a", 1)
		rb, _ := admin.Publish(ctxT(t, 5*time.Second), prefix+".b.c", 2)
		_, _ = admin.Publish(ctxT(t, 5*time.Second), prefix+"x.a", 3) // not matched
		m1, m2 := ev.message(10*time.Second), ev.message(10*time.Second)
		if m1.ID != ra.ID || m1.Topic != prefix+".a" || m2.ID != rb.ID || m2.Topic != prefix+".b.c" {
			t.Fatalf("%s: %+v %+v", tr, m1, m2)
		}
		cur := c.Cursors()
		if cur[prefix+".a"] != ra.ID || cur[prefix+".b.c"] != rb.ID {
			t.Fatalf("%s: cursors %v", tr, cur)
		}
		closeClient(t, c, ev)
	}
}

// Publish over the WebSocket (dev mode) and over HTTP, and read the history.
func TestIntegrationPublishAndHistory(t *testing.T) {
	h := startHerald(t, "--dev")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE} {
		for _, mp := range []bool{false, true} {
			if mp && tr != heraldpush.WebSocket {
				continue
			}
			topic := fmt.Sprintf("pub.%s.%v", tr, mp)
			c, ev := newClient(t, heraldpush.Options{URLs: []string{h.public}, Topics: []string{topic}, Transports: []heraldpush.Transport{tr}, MsgPack: mp})
			ev.connected(10*time.Second, tr)
			r, err := c.Publish(ctxT(t, 5*time.Second), topic, map[string]any{"big": 1 << 40, "f": 1.5, "s": "é"})
			if err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
			m := ev.message(10 * time.Second)
			if m.ID != r.ID {
				t.Fatalf("%s: got %s, published %s", topic, m.ID, r.ID)
			}
			var v map[string]any
			if err := json.Unmarshal(m.Data, &v); err != nil || v["big"] != float64(1<<40) || v["f"] != 1.5 || v["s"] != "é" {
				t.Fatalf("%s: data %s", topic, m.Data)
			}
			page, err := c.History(ctxT(t, 5*time.Second), topic, heraldpush.HistoryOptions{Limit: 10})
			if err != nil || len(page.Messages) != 1 || page.Messages[0].ID != r.ID {
				t.Fatalf("%s: history %+v %v", topic, page, err)
			}
			if _, err := c.Publish(ctxT(t, 5*time.Second), "bad topic", 1); err == nil {
				t.Fatal("a bad topic was published")
			}
			closeClient(t, c, ev)
		}
	}
}

// The first URL is dead: the client goes on to the next node.
func TestIntegrationNextURL(t *testing.T) {
	h := startHerald(t, "--dev")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, ev := newClient(t, heraldpush.Options{
		URLs: []string{"http://127.0.0.1:1", h.public + "/"}, Topics: []string{"nexturl"},
		Backoff: heraldpush.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	ev.connected(10*time.Second, heraldpush.WebSocket)
	closeClient(t, c, ev)
}
