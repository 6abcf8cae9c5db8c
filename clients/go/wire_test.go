package heraldpush

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCursors(t *testing.T) {
	c, ok := ParseCursor("009f86d081884c7d-0042")
	if !ok || c.Epoch != "9f86d081884c7d" || c.Seq != "42" {
		t.Fatalf("%+v %v", c, ok)
	}
	for _, bad := range []string{"", "x-1", "9f-", "-1", "9F-1", "9f-1-2", "12345678901234567-1", "9f-123456789012345678901"} {
		if _, ok := ParseCursor(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	cases := []struct {
		id, cursor string
		after      bool
	}{
		{"a-2", "", true},
		{"a-2", "a-1", true},
		{"a-1", "a-1", false},
		{"a-1", "a-2", false},
		{"a-10", "a-9", true}, // numeric, not text order
		{"a-18446744073709551615", "a-18446744073709551614", true},
		{"a-01", "a-1", false},
		{"b-1", "a-5", true}, // another epoch: the gateway signals the loss
		{"junk", "a-5", true},
	}
	for _, tc := range cases {
		if got := IsAfter(tc.id, tc.cursor); got != tc.after {
			t.Errorf("IsAfter(%q, %q) = %v", tc.id, tc.cursor, got)
		}
	}
}

func TestResumeLists(t *testing.T) {
	got := ParseResumeList("a=9f-41, b.c=1c-7,bad topic=1-1,x=notacursor,=1-1,y")
	want := []TopicCursor{{"a", "9f-41"}, {"b.c", "1c-7"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
	if s := FormatResumeList([]TopicCursor{{"a", "9f-41"}, {"p.*", ""}, {"b", "1-0"}}); s != "a=9f-41,b=1-0" {
		t.Fatal(s)
	}
}

func TestPatterns(t *testing.T) {
	for _, ok := range []string{"news", "orders.*", "orders.eu.*", "chat:*", "chat:room.*", "user:ann"} {
		if err := CheckSubscription(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*", "orders*", "ord*", "a.*.b", "a*b", "user:*", "user:alice.*", "conn:*", "has space", strings.Repeat("a", 128) + ".*", "é"} {
		if err := CheckSubscription(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	match := map[[2]string]bool{
		{"orders.*", "orders.eu"}:       true,
		{"orders.*", "orders.eu.paris"}: true,
		{"orders.*", "orders"}:          false,
		{"orders.*", "ordersx.eu"}:      false,
		{"orders.*", "orders.eu:x"}:     false,
		{"chat:*", "chat:room1"}:        true,
		{"chat:*", "chat:a:b"}:          true,
		{"orders.*", "orders.*"}:        false,
	}
	for k, want := range match {
		if got := MatchesPattern(k[0], k[1]); got != want {
			t.Errorf("MatchesPattern(%q, %q) = %v", k[0], k[1], got)
		}
	}
}

func TestJSONFrames(t *testing.T) {
	f, err := decodeJSONFrame([]byte(`{"type":"message","topic":"a","id":"9f-42","event":"e","data":{"n":1}}`))
	if err != nil || f.Topic != "a" || f.ID != "9f-42" || f.Event != "e" || string(f.Data) != `{"n":1}` {
		t.Fatalf("%+v %v", f, err)
	}
	for _, bad := range []string{
		`{"type":"message","topic":`,
		`[1,2]`,
		`{"topic":"a"}`,
		`{"type":"message","topic":"a","id":"nope","data":1}`,
		`{"type":"message","topic":"a b","id":"9f-1","data":1}`,
		`{"type":"message","topic":"a","id":"9f-1"}`,
		`{"type":"lost","topic":"a"}`,
	} {
		if _, err := decodeJSONFrame([]byte(bad)); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	b, _ := subscribeCommand([]string{"a", "p.*"}, map[string]string{"a": "9f-1"}).encodeJSON()
	if string(b) != `{"type":"subscribe","topics":["a","p.*"],"cursors":{"a":"9f-1"}}` {
		t.Fatal(string(b))
	}
	b, _ = publishCommand("a", json.RawMessage(`{"x":[1,"y"]}`), "").encodeJSON()
	if string(b) != `{"type":"publish","topic":"a","data":{"x":[1,"y"]}}` {
		t.Fatal(string(b))
	}
}

func TestMsgpackFrames(t *testing.T) {
	payload := map[string]any{"n": int8(5), "big": uint64(1) << 63, "f": 1.5, "bin": []byte{1, 2, 3}, "list": []any{"a", nil, true}}
	b, err := msgpack.Marshal(map[string]any{"type": "message", "topic": "t", "id": "9f-3", "data": payload})
	if err != nil {
		t.Fatal(err)
	}
	f, err := decodeMsgpackFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(string(f.Data)))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["n"] != json.Number("5") || got["big"] != json.Number("9223372036854775808") || got["bin"] != "AQID" || got["f"] != json.Number("1.5") {
		t.Fatalf("JSON form %s", f.Data)
	}
	var back map[string]any
	if err := msgpack.Unmarshal(f.raw, &back); err != nil || !reflect.DeepEqual(back["bin"], []byte{1, 2, 3}) {
		t.Fatalf("raw payload %v %v", back, err)
	}
	// What has no JSON form, or is not a map with string keys, is malformed.
	bad := [][]byte{
		mustMsgpack(t, []any{1, 2}),
		mustMsgpack(t, map[int]any{1: "x"}),
		mustMsgpack(t, map[string]any{"type": "message", "topic": "t", "id": "9f-1", "data": map[any]any{1: 2}}),
		mustMsgpack(t, map[string]any{"type": "message", "topic": "t", "id": "9f-1", "data": time.Unix(1, 0)}),
		{0xc1},
	}
	for i, b := range bad {
		if _, err := decodeMsgpackFrame(b); !errors.Is(err, errMalformed) {
			t.Errorf("bad frame %d: %v", i, err)
		}
	}
	// Commands: JSON data goes as MessagePack, integers as integers.
	cb, err := publishCommand("t", json.RawMessage(`{"i":3,"f":2.5,"big":18446744073709551615}`), "ev").encodeMsgpack()
	if err != nil {
		t.Fatal(err)
	}
	var cmd map[string]any
	if err := msgpack.Unmarshal(cb, &cmd); err != nil {
		t.Fatal(err)
	}
	data := cmd["data"].(map[string]any)
	if cmd["type"] != "publish" || cmd["event"] != "ev" || fmt.Sprintf("%T %v", data["i"], data["i"])[0] != 'i' || fmt.Sprint(data["i"]) != "3" || data["f"] != 2.5 || data["big"] != uint64(18446744073709551615) {
		t.Fatalf("%#v", cmd)
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSSEParserAnySplit(t *testing.T) {
	stream := "retry: 3000\r\nid: a=9f-1\r\n\r\n: ping\n\nid: a=9f-2\nevent: herald.lost\ndata: {\"topic\":\"a\",\r\ndata: \"reason\":\"expired\"}\r\rdata: x\n\n"
	want := []string{"|a=9f-1", "herald.lost|{\"topic\":\"a\",\n\"reason\":\"expired\"}|a=9f-2", "message|x"}
	for split := 0; split <= len(stream); split++ {
		var got []string
		var retries []int64
		p := &sseParser{max: 1 << 10, retry: func(ms int64) { retries = append(retries, ms) }}
		emit := func(b sseBlock) error {
			s := b.Event + "|" + b.Data
			if b.Event == "" {
				s = "|" + *b.ID
			} else if b.ID != nil {
				s += "|" + *b.ID
			}
			got = append(got, s)
			return nil
		}
		if err := p.push([]byte(stream[:split]), emit); err != nil {
			t.Fatal(err)
		}
		if err := p.push([]byte(stream[split:]), emit); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(retries, []int64{3000}) {
			t.Fatalf("split %d: %q %v", split, got, retries)
		}
	}
	p := &sseParser{max: 16}
	if err := p.push([]byte(strings.Repeat("x", 17)), func(sseBlock) error { return nil }); !errors.Is(err, errMalformed) {
		t.Fatalf("a long line: %v", err)
	}
	p = &sseParser{max: 16}
	if err := p.push([]byte("data: 0123456789\ndata: 0123456789\n"), func(sseBlock) error { return nil }); !errors.Is(err, errMalformed) {
		t.Fatalf("a long event: %v", err)
	}
}

func TestSSEHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		server  bool
		ask     int
		dead    time.Duration
	}{
		{40 * time.Second, false, 20, 40 * time.Second},
		{2 * time.Second, false, 1, 2250 * time.Millisecond},
		{20 * time.Minute, false, 300, 20 * time.Minute},
		{2 * time.Second, true, 0, 15*time.Second*5/4 + time.Second},
	} {
		ask, dead := sseHeartbeat(tc.timeout, tc.server)
		if ask != tc.ask || dead != tc.dead {
			t.Errorf("%v %v: %d %v", tc.timeout, tc.server, ask, dead)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for attempt := 0; attempt < 40; attempt++ {
		bound := min(time.Second, 100*time.Millisecond<<min(attempt, 20))
		for _, r := range []float64{0, 0.5, 0.999999} {
			d := b.Delay(attempt, func() float64 { return r })
			if d < bound/2 || d > bound {
				t.Fatalf("attempt %d r %v: %v outside [%v, %v]", attempt, r, d, bound/2, bound)
			}
		}
	}
	// Each URL fails once, then the next transport.
	r := newReconnects(2, 3, b, func() float64 { return 0 })
	steps := [][2]int{}
	for i := 0; i < 6; i++ {
		r.ended(r.transport, false, false, 0)
		steps = append(steps, [2]int{r.transport, r.url})
	}
	want := [][2]int{{0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {0, 0}}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("%v", steps)
	}
	if d := r.ended(r.transport, true, false, 0); d > b.Min || r.failures != 0 {
		t.Fatalf("a stable connection resets the backoff: %v %d", d, r.failures)
	}
	if d := r.ended(r.transport, true, false, 7*time.Second); d != 7*time.Second {
		t.Fatalf("the server's hint: %v", d)
	}
}

func TestStore(t *testing.T) {
	s := newStore([]string{"a", "p.*"}, map[string]string{"a": "e-5", "p.x": "e-1", "zz": "e-1"})
	if ok, _ := s.accept("a", "e-5"); ok {
		t.Fatal("a duplicate was delivered")
	}
	if ok, server := s.accept("a", "e-6"); !ok || server {
		t.Fatal("a new message was not delivered")
	}
	if ok, _ := s.accept("other", "e-1"); ok {
		t.Fatal("a topic nobody subscribed was delivered")
	}
	sn := s.snapshot()
	if !reflect.DeepEqual(sn.topics, []TopicCursor{{"a", "e-6"}, {"p.*", ""}}) || !reflect.DeepEqual(sn.patternCursors, []TopicCursor{{"p.x", "e-1"}}) {
		t.Fatalf("%+v", sn)
	}
	// Another epoch: the position is a hint until the loss signal.
	s.position("a", "f-0")
	if s.cursor("a") != "e-6" {
		t.Fatal("a position of another epoch moved the cursor")
	}
	if !s.lost("a", "") || s.cursor("a") != "f-0" {
		t.Fatalf("after the loss: %q", s.cursor("a"))
	}
	// A pattern's topics: the most recent MaxPatternTopics keep their cursors.
	for i := 0; i < MaxPatternTopics+5; i++ {
		s.accept("p.t"+strings.Repeat("x", i), "e-1")
	}
	if n := len(s.snapshot().patternCursors); n != MaxPatternTopics {
		t.Fatalf("%d pattern cursors", n)
	}
	if s.cursor("p.x") != "" {
		t.Fatal("the least recent pattern topic kept its cursor")
	}
	s.mu.Lock()
	s.remove("p.*")
	s.mu.Unlock()
	// (A cursor given at the start for a topic not subscribed yet is kept for later.)
	if len(s.snapshot().patternCursors) != 0 || !reflect.DeepEqual(s.cursorsCopy(), map[string]string{"a": "f-0", "zz": "e-1"}) {
		t.Fatalf("after unsubscribing the pattern: %v", s.cursorsCopy())
	}
	// Topics of the application's: delivered as such, forgotten with the connection.
	if added := s.serverSubscribed([]string{"user:ann", "a"}); !reflect.DeepEqual(added, []string{"user:ann"}) {
		t.Fatal(added)
	}
	if ok, server := s.accept("user:ann", "u-1"); !ok || !server {
		t.Fatal("a server topic's message")
	}
	if gone := s.connectionEnded(); !reflect.DeepEqual(gone, []string{"a", "user:ann"}) || s.cursor("user:ann") != "" || s.cursor("a") == "" {
		t.Fatalf("%v %v", gone, s.cursorsCopy())
	}
}

func TestTokenExpiry(t *testing.T) {
	exp, ok := tokenExpiry("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjE3NjcyMjU2MDAsInN1YiI6ImEifQ.sig")
	if !ok || exp.Unix() != 1767225600 {
		t.Fatal(exp, ok)
	}
	if _, ok := tokenExpiry("nope"); ok {
		t.Fatal("not a JWT")
	}
}

func TestSSEBlocks(t *testing.T) {
	id := func(s string) *string { return &s }
	ev, err := decodeSSEBlock(sseBlock{ID: id("a=e-1,b=f-2")})
	if err != nil || ev.kind != ssePositions || !reflect.DeepEqual(ev.positions, []TopicCursor{{"a", "e-1"}, {"b", "f-2"}}) {
		t.Fatalf("opening: %+v %v", ev, err)
	}
	ev, err = decodeSSEBlock(sseBlock{Event: "herald.lost", Data: `{"topic":"a","reason":"expired"}`, ID: id("a=e-9,b=f-2")})
	if err != nil || ev.kind != sseLostSignal || ev.lost != (sseLost{"a", "expired"}) || ev.lostAt != "e-9" || !reflect.DeepEqual(ev.positions, []TopicCursor{{"b", "f-2"}}) {
		t.Fatalf("lost: %+v %v", ev, err)
	}
	ev, err = decodeSSEBlock(sseBlock{Event: "message", Data: `{"type":"message","topic":"a","id":"e-3","event":"x","data":"s"}`, ID: id("a=e-3")})
	if err != nil || ev.kind != sseMessage || ev.frame.ID != "e-3" || ev.frame.Event != "x" || string(ev.frame.Data) != `"s"` {
		t.Fatalf("message: %+v %v", ev, err)
	}
	ev, err = decodeSSEBlock(sseBlock{Event: "herald.shutdown", Data: `{"reason":"shutdown","retry_ms":1234}`})
	if err != nil || ev.kind != sseShutdownSignal || ev.retry != 1234*time.Millisecond {
		t.Fatalf("shutdown: %+v %v", ev, err)
	}
	ev, _ = decodeSSEBlock(sseBlock{Event: "herald.disconnect", Data: `{"reason":"banned","reconnect":false}`})
	if ev.kind != sseDisconnectSignal || ev.reason != "banned" || ev.reconnect {
		t.Fatalf("disconnect: %+v", ev)
	}
	ev, _ = decodeSSEBlock(sseBlock{Event: "herald.disconnect", Data: `{"reason":"token expired"}`})
	if ev.reason != "token expired" || !ev.reconnect {
		t.Fatalf("token expired: %+v", ev)
	}
	ev, err = decodeSSEBlock(sseBlock{Event: "herald.join", Data: `{"topic":"room:1","conn":"7","node":"n","transport":"ws","user":"ann","info":{"d":1}}`})
	if err != nil || ev.kind != sseMember || ev.frame.Type != "join" || *ev.frame.User != "ann" || ev.frame.Conn != "7" {
		t.Fatalf("join: %+v %v", ev, err)
	}
	ev, err = decodeSSEBlock(sseBlock{Event: "herald.subscribed", Data: `{"topics":["news"]}`, ID: id("news=e-0")})
	if err != nil || ev.kind != sseSubscribed || !reflect.DeepEqual(ev.topics, []string{"news"}) || len(ev.positions) != 1 {
		t.Fatalf("subscribed: %+v %v", ev, err)
	}
	if ev, err := decodeSSEBlock(sseBlock{Event: "something.new", Data: "x"}); err != nil || ev.kind != sseIgnored {
		t.Fatalf("unknown: %+v %v", ev, err)
	}
	for _, bad := range []sseBlock{
		{Event: "message", Data: `{"type":"message","topic":`},
		{Event: "message", Data: `{"type":"lost","topic":"a","reason":"x"}`},
		{Event: "herald.lost", Data: `{"topic":"a"}`},
		{Event: "herald.subscribed", Data: `[`},
		{Event: "herald.leave", Data: `{}`},
	} {
		if _, err := decodeSSEBlock(bad); !errors.Is(err, errMalformed) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestPollAnswers(t *testing.T) {
	r, err := decodePollAnswer([]byte(`{"messages":[{"type":"message","topic":"a","id":"f-1","data":1},{"type":"message","topic":"a","id":"f-2","data":2}],
		"lost":[{"topic":"a","reason":"epoch"},{"topic":"b","reason":"expired"}],"cursor":"a=f-2,b=c-5","more":false,
		"presence":[{"type":"join","topic":"a","conn":"1","node":"n","transport":"sse","user":null}],
		"disconnect":{"reason":"bye","reconnect":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	// a has messages: it goes on from them; b from the cursor.
	if len(r.lost) != 2 || r.lost[0].at != "" || r.lost[1].at != "c-5" || r.lost[1].reason != "expired" {
		t.Fatalf("%+v", r.lost)
	}
	if len(r.messages) != 2 || len(r.members) != 1 || r.members[0].User != nil || r.disconnect == nil || r.disconnect.reconnect || r.disconnect.reason != "bye" {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{`{`, `{"messages":[{"type":"message"}]}`, `{"lost":[{"topic":"a"}]}`, `{"messages":[{"type":"join","topic":"a"}]}`} {
		if _, err := decodePollAnswer([]byte(bad)); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// Whatever arrives, decoding answers or errs; it never panics.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","topic":"a","id":"9f-42","data":{"n":1}}`,
		`{"type":"subscribed","topics":["a"],"cursors":{"a":"1-0"},"by":"server"}`,
		`{"messages":[],"lost":[{"topic":"a","reason":"epoch"}],"cursor":"a=1-2"}`,
		"id: a=1-1\nevent: herald.lost\ndata: {\"topic\":\"a\",\"reason\":\"expired\"}\n\n",
		"\x83\xa4type\xa7message\xa5topic\xa1a\xa2id\xa41-42",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeJSONFrame(b)
		_, _ = decodeMsgpackFrame(b)
		_, _ = decodePollAnswer(b)
		p := &sseParser{max: 1 << 12}
		_ = p.push(b, func(blk sseBlock) error {
			_, err := decodeSSEBlock(blk)
			return err
		})
		_ = ParseResumeList(string(b))
	})
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{URLs: []string{"ftp://x"}},
		{URLs: []string{"http://x"}, Topics: []string{"a*"}},
		{URLs: []string{"http://x"}, Transports: []Transport{"carrier-pigeon"}},
		{URLs: []string{"http://x"}, Cursors: map[string]string{"a": "nope"}},
	} {
		if c, err := New(o); err == nil {
			_ = c.Close()
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestPollTimes(t *testing.T) {
	for _, tc := range []struct{ poll, hb, hold, grace time.Duration }{
		{25 * time.Second, 40 * time.Second, 20 * time.Second, 20 * time.Second},
		{25 * time.Second, 3 * time.Second, time.Second, 2 * time.Second},
		{25 * time.Second, 400 * time.Millisecond, time.Second, time.Second},
		{5 * time.Second, time.Minute, 5 * time.Second, 55 * time.Second},
	} {
		if hold, grace := pollTimes(tc.poll, tc.hb); hold != tc.hold || grace != tc.grace {
			t.Errorf("%v %v: %v %v", tc.poll, tc.hb, hold, grace)
		}
	}
}
