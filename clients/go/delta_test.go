package heraldpush_test

// Delta compression (docs/protocol.md "Delta compression"): the Fossil decoder against a delta
// made by Fossil's own encoder (npm fossil-delta) and crafted malformed deltas; and the client
// over a WebSocket (JSON and MessagePack), SSE and long-poll against fakes of the gateway:
// deltas applied transparently, and a delta that does not apply counted, never delivered, its
// topic subscribed again from the last message delivered.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
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

const fossilDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"

func b64(v uint64) string {
	s := ""
	for {
		s = string(fossilDigits[v&63]) + s
		v >>= 6
		if v == 0 {
			return s
		}
	}
}

// makeDelta is a test encoder of valid Fossil deltas: the common prefix and suffix copied,
// the rest inserted.
func makeDelta(a, b []byte) []byte {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < min(len(a), len(b))-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	var out bytes.Buffer
	out.WriteString(b64(uint64(len(b))) + "\n")
	if p > 0 {
		out.WriteString(b64(uint64(p)) + "@0,")
	}
	if mid := b[p : len(b)-s]; len(mid) > 0 {
		out.WriteString(b64(uint64(len(mid))) + ":")
		out.Write(mid)
	}
	if s > 0 {
		out.WriteString(b64(uint64(s)) + "@" + b64(uint64(len(a)-s)) + ",")
	}
	out.WriteString(b64(uint64(heraldpush.FossilChecksum(b))) + ";")
	return out.Bytes()
}

// corrupt changes the checksum's last digit.
func corrupt(d []byte) []byte {
	c := bytes.Clone(d)
	if c[len(c)-2] == '0' {
		c[len(c)-2] = '1'
	} else {
		c[len(c)-2] = '0'
	}
	return c
}

func TestApplyFossilAgainstFossilsEncoder(t *testing.T) {
	// Made by fossil-delta 2.0.0 (npm): createDelta(a, b).
	var players []string
	for i := 0; i < 12; i++ {
		players = append(players, fmt.Sprintf(`{"id":%d,"name":"player-%d","goals":%d}`, i, i, i%3))
	}
	a := `{"match":"a","score":[1,0],"players":[` + strings.Join(players, ",") + "]}"
	b := strings.Replace(strings.Replace(a, `"score":[1,0]`, `"score":[2,0]`, 1), `"id":7,"name":"player-7","goals":1`, `"id":7,"name":"player-7","goals":5`, 1)
	out, err := heraldpush.ApplyFossil([]byte(a), []byte("7c\nM@0,1:24p@N,1:52R@5C,2TTMke;"), 0)
	if err != nil || string(out) != b {
		t.Fatalf("%v: %s", err, out)
	}
	// A chain.
	rng := rand.New(rand.NewSource(1))
	base := []byte(a)
	for n := 0; n < 50; n++ {
		next := bytes.Clone(base)
		next[rng.Intn(len(next))] = byte('a' + n%26)
		got, err := heraldpush.ApplyFossil(base, makeDelta(base, next), 0)
		if err != nil || !bytes.Equal(got, next) {
			t.Fatalf("step %d: %v", n, err)
		}
		base = next
	}
}

func TestApplyFossilRefusesMalformedDeltas(t *testing.T) {
	base := []byte(`{"score":[1,2,3,4,5,6,7,8,9,10],"name":"the home team"}`)
	good := makeDelta(base, []byte(`{"score":[1,2,3,4,5,6,7,8,9,11],"name":"the home team"}`))
	if _, err := heraldpush.ApplyFossil(base, good, 0); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		if _, err := heraldpush.ApplyFossil(base, good[:n], 0); err == nil {
			t.Fatalf("truncated at %d: no error", n)
		}
	}
	cases := map[string]string{
		string(corrupt(good)): "bad checksum",
		"3~~~~~\n0;":          "claims a result", // 2^32-1: refused before allocating
		b64(heraldpush.MaxDeltaTarget+1) + "\n0;": "claims a result",
		"~~~~~~~~~~\n": "32 bits",
		"A\nA@zz,0;":   "end of the base",
		"A\nA:abc":     "end of the delta",
		"3\n3!abc0;":   "unknown command",
		"3\n2:ab0;":    "2 bytes made, 3 claimed",
		"1\n2:ab0;":    "past the claimed size",
		"1\n1:a" + b64(uint64(heraldpush.FossilChecksum([]byte("a")))) + ";x": "after the checksum",
	}
	for d, want := range cases {
		_, err := heraldpush.ApplyFossil(base, []byte(d), 0)
		var de *heraldpush.DeltaError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", d, err, want)
		}
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 5000; i++ { // garbage: an error or a result, never a panic
		g := make([]byte, 2+i%40)
		rng.Read(g)
		g[0], g[1] = '3', '\n'
		_, _ = heraldpush.ApplyFossil(base, g, 0)
	}
}

func state(n int) map[string]any {
	return map[string]any{"match": "a", "score": []any{n, 0}, "log": strings.Repeat("x", 60), "n": n}
}

func jsonOf(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// deltaFrame is topic a's message n: full, or a delta against n-1 (corrupted when bad).
func deltaFrame(n int, asDelta, bad bool) []byte {
	if !asDelta {
		return jsonOf(map[string]any{"type": "message", "topic": "a", "id": fmt.Sprintf("e-%d", n), "data": state(n)})
	}
	d := makeDelta(jsonOf(state(n-1)), jsonOf(state(n)))
	if bad {
		d = corrupt(d)
	}
	return []byte(fmt.Sprintf(`{"type":"message","topic":"a","id":"e-%d","delta":true,"data":%s}`, n, jsonOf(string(d))))
}

// want4 reads messages 1..4 of topic a with the full data, in order.
func want4(t *testing.T, ev *events) {
	t.Helper()
	for n := 1; n <= 4; n++ {
		m := ev.message(5 * time.Second)
		var got map[string]any
		if err := m.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if m.ID != fmt.Sprintf("e-%d", n) || !reflect.DeepEqual(got, jsonRound(state(n))) {
			t.Fatalf("message %d: %s %s", n, m.ID, m.Data)
		}
	}
}

// sortedMsgpack encodes maps with their keys sorted, so that the data of a frame is the same
// bytes as the data encoded alone (the base the fake makes its deltas against).
func sortedMsgpack(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	_ = enc.Encode(v)
	return buf.Bytes()
}

func jsonRound(v any) any {
	var out any
	_ = json.Unmarshal(jsonOf(v), &out)
	return out
}

func TestDeltaWebSocket(t *testing.T) {
	for _, mp := range []bool{false, true} {
		t.Run(fmt.Sprintf("msgpack=%v", mp), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var mu sync.Mutex
			var frames []map[string]any
			corrupted := false
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
				send := func(v map[string]any) {
					if mp {
						b := sortedMsgpack(v)
						_ = ws.Write(ctx, websocket.MessageBinary, b)
					} else {
						_ = ws.Write(ctx, websocket.MessageText, jsonOf(v))
					}
				}
				data := func(n int) []byte {
					if mp {
						return sortedMsgpack(state(n))
					}
					return jsonOf(state(n))
				}
				for {
					_, b, err := ws.Read(ctx)
					if err != nil {
						return
					}
					var f map[string]any
					if mp {
						_ = msgpack.Unmarshal(b, &f)
					} else {
						_ = json.Unmarshal(b, &f)
					}
					mu.Lock()
					frames = append(frames, f)
					mu.Unlock()
					switch f["type"] {
					case "unsubscribe":
						send(map[string]any{"type": "unsubscribed", "topics": f["topics"]})
					case "subscribe":
						start := 0
						if cs, ok := f["cursors"].(map[string]any); ok {
							fmt.Sscanf(fmt.Sprint(cs["a"]), "e-%d", &start)
						}
						send(map[string]any{"type": "subscribed", "topics": f["topics"], "cursors": map[string]any{"a": fmt.Sprintf("e-%d", start)}})
						for n := start + 1; n <= 4; n++ {
							if n == start+1 {
								send(map[string]any{"type": "message", "topic": "a", "id": fmt.Sprintf("e-%d", n), "data": state(n)})
								continue
							}
							d := makeDelta(data(n-1), data(n))
							if n == 3 && !corrupted {
								corrupted, d = true, corrupt(d)
							}
							var payload any = string(d)
							if mp {
								payload = d
							}
							send(map[string]any{"type": "message", "topic": "a", "id": fmt.Sprintf("e-%d", n), "delta": true, "data": payload})
						}
					}
				}
			}))
			defer srv.Close()
			c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Topics: []string{"a"}, Delta: heraldpush.DeltaFossil,
				MsgPack: mp, Transports: []heraldpush.Transport{heraldpush.WebSocket}, Backoff: fast})
			for n := 1; n <= 4; n++ {
				m := ev.next(5*time.Second, fmt.Sprintf("message %d", n), func(e heraldpush.Event) bool {
					if isError(e, "bad delta of a: bad checksum") {
						return false
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
			if s := c.Stats(); s.Deltas != 2 || s.DeltaFailures != 1 {
				t.Fatalf("stats %+v", s)
			}
			mu.Lock()
			var subs []map[string]any
			unsubs := 0
			for _, f := range frames {
				if f["type"] == "subscribe" {
					subs = append(subs, f)
				}
				if f["type"] == "unsubscribe" {
					unsubs++
				}
			}
			mu.Unlock()
			if len(subs) != 2 || subs[0]["delta"] != "fossil" || subs[1]["delta"] != "fossil" || unsubs != 1 ||
				fmt.Sprint(subs[1]["cursors"]) != "map[a:e-2]" {
				t.Fatalf("subscribes %v, %d unsubscribes", subs, unsubs)
			}
			closeClient(t, c, ev)
		})
	}
}

func TestDeltaSSEAndPoll(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var f sseFake
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.record(r)
		if r.URL.Path == "/v1/poll" {
			if n > 2 {
				<-r.Context().Done()
				return
			}
			var msgs [][]byte
			if n == 1 {
				msgs = [][]byte{deltaFrame(1, false, false), deltaFrame(2, true, false), deltaFrame(3, true, true), deltaFrame(4, true, false)}
			} else {
				msgs = [][]byte{deltaFrame(3, false, false), deltaFrame(4, true, false)}
			}
			_, _ = w.Write([]byte(`{"messages":[` + string(bytes.Join(msgs, []byte(","))) + `],"cursor":"a=e-4"}`))
			return
		}
		w.Header().Set("content-type", "text/event-stream")
		if n == 1 {
			sseWrite(w, "retry: 1000\nid: a=e-0\n\n")
			for i, d := range [][]byte{deltaFrame(1, false, false), deltaFrame(2, true, false), deltaFrame(3, true, true), deltaFrame(4, true, false)} {
				sseWrite(w, fmt.Sprintf("id: a=e-%d\ndata: %s\n\n", i+1, d))
			}
		} else {
			sseWrite(w, "retry: 1000\nid: a=e-2\n\n")
			sseWrite(w, fmt.Sprintf("id: a=e-3\ndata: %s\n\n", deltaFrame(3, false, false)))
			sseWrite(w, fmt.Sprintf("id: a=e-4\ndata: %s\n\n", deltaFrame(4, true, false)))
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	for _, tr := range []heraldpush.Transport{heraldpush.SSE, heraldpush.LongPoll} {
		f = sseFake{}
		c, ev := newClient(t, heraldpush.Options{URLs: []string{srv.URL}, Transports: []heraldpush.Transport{tr}, Backoff: fast})
		if err := c.SubscribeWith(heraldpush.SubscribeOptions{Delta: heraldpush.DeltaFossil}, "a"); err != nil {
			t.Fatal(err)
		}
		want4(t, ev)
		if s := c.Stats(); s.Deltas != 2 || s.DeltaFailures != 1 {
			t.Fatalf("%s: stats %+v", tr, s)
		}
		first, second := f.request(0), f.request(1)
		if first.URL.Query().Get("delta") != "fossil" || first.URL.Query().Get("format") != "json" {
			t.Fatalf("%s: %s", tr, first.URL)
		}
		if tr == heraldpush.SSE && second.Header.Get("last-event-id") != "a=e-2" {
			t.Fatalf("sse: resumed from %q", second.Header.Get("last-event-id"))
		}
		if tr == heraldpush.LongPoll && second.URL.Query().Get("cursor") != "a=e-2" {
			t.Fatalf("poll: resumed from %q", second.URL.Query().Get("cursor"))
		}
		closeClient(t, c, ev)
	}
	if _, err := heraldpush.New(heraldpush.Options{URLs: []string{srv.URL}, Delta: "zstd"}); err == nil {
		t.Fatal("an unknown delta accepted")
	}
}
