package heraldpush

// The wire: what goes over the connection, as docs/protocol.md defines it. Topic names and
// prefix patterns, cursors and resume lists, the loss signal, the frame the client reads and
// the commands it writes. The JSON frames (batch frames included) are read in wire_json.go,
// the MessagePack ones in wire_msgpack.go (their data's JSON form: wire_jsonform.go); the
// event stream and the long-poll answer are in wire_stream.go. Nothing here knows about
// connections, retries or state; the transports (ws.go, sse.go, poll.go) read and write
// through these functions only, so these files can be checked against the protocol on their
// own.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxPatternTopics is how many topics the gateway keeps positions for per connection for the
// topics its patterns delivered (all patterns together), the most recent ones. The client
// keeps as many cursors for them, no more.
const MaxPatternTopics = 32

// Loss reasons the gateway sends (Lost.Reason).
const (
	LostExpired = "expired" // the position is older than the history kept
	LostEpoch   = "epoch"   // the position belongs to another life of the stream
	LostLagged  = "lagged"  // the client fell too far behind the live stream
)

// topicByte: the bytes of a topic name, A-Z a-z 0-9 _ . : @ -.
var topicByte = func() (t [256]bool) {
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@-" {
		t[c] = true
	}
	return t
}()

// ValidTopic reports whether name is a topic name: 1-128 characters of A-Z a-z 0-9 _ . : @ -.
// (Checked byte by byte rather than with a regular expression: it runs for every message.)
func ValidTopic(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !topicByte[name[i]] {
			return false
		}
	}
	return true
}

// IsPattern reports whether name is meant as a prefix pattern (it ends in `*`).
func IsPattern(name string) bool { return strings.HasSuffix(name, "*") }

// CheckSubscription returns why name cannot be subscribed to (as a topic, or as a prefix
// pattern when it ends in `*`), with the gateway's own rules, or nil when it can.
func CheckSubscription(name string) error {
	if !IsPattern(name) {
		if strings.Contains(name, "*") {
			return fmt.Errorf("heraldpush: bad topic %q: `*` stands only last, after `.` or `:`", name)
		}
		if !ValidTopic(name) {
			return fmt.Errorf("heraldpush: bad topic %q: 1-128 characters of A-Z a-z 0-9 _ . : @ -", name)
		}
		return nil
	}
	prefix := strings.TrimSuffix(name, "*")
	switch {
	case prefix == "":
		return fmt.Errorf("heraldpush: bad pattern %q: a bare `*` would match every topic", name)
	case len(name) > 128:
		return fmt.Errorf("heraldpush: bad pattern %q: longer than 128 characters", name)
	case strings.Contains(prefix, "*") || !ValidTopic(prefix):
		return fmt.Errorf("heraldpush: bad pattern %q: the prefix is a topic name, then `*`", name)
	case !strings.HasSuffix(prefix, ".") && !strings.HasSuffix(prefix, ":"):
		return fmt.Errorf("heraldpush: bad pattern %q: `*` must follow `.` or `:`", name)
	case strings.HasPrefix(prefix, "user:") || strings.HasPrefix(prefix, "conn:"):
		return fmt.Errorf("heraldpush: bad pattern %q: personal topics cannot be matched by a pattern", name)
	}
	return nil
}

// MatchesPattern reports whether the prefix pattern (`orders.*`) matches topic: the topic
// starts with the pattern's prefix and lies in the same namespace (the part before the
// first `:`).
func MatchesPattern(pattern, topic string) bool {
	if !IsPattern(pattern) || IsPattern(topic) {
		return false
	}
	prefix := strings.TrimSuffix(pattern, "*")
	return strings.HasPrefix(topic, prefix) && (strings.Contains(prefix, ":") || !strings.Contains(topic, ":"))
}

// Cursor is a parsed position `<epoch>-<seq>`. Seq is kept as text (no leading zeros): it
// may exceed what a float holds, and compares by length first.
type Cursor struct {
	Epoch string
	Seq   string
}

// ParseCursor parses `<epoch>-<seq>` (1-16 lowercase hex digits, `-`, 1-20 decimal digits);
// ok is false when text is not a cursor. It runs several times per message: no regular
// expression, no allocation.
func ParseCursor(text string) (c Cursor, ok bool) {
	dash := strings.IndexByte(text, '-')
	if dash < 1 || dash > 16 || len(text)-dash-1 < 1 || len(text)-dash-1 > 20 {
		return Cursor{}, false
	}
	epoch, seq := text[:dash], text[dash+1:]
	for i := 0; i < len(epoch); i++ {
		if c := epoch[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Cursor{}, false
		}
	}
	for i := 0; i < len(seq); i++ {
		if c := seq[i]; c < '0' || c > '9' {
			return Cursor{}, false
		}
	}
	trim := func(s string) string {
		t := strings.TrimLeft(s, "0")
		if t == "" {
			return "0"
		}
		return t
	}
	return Cursor{Epoch: trim(epoch), Seq: trim(seq)}, true
}

func compareSeq(a, b string) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// IsAfter reports whether a message at id is new for a subscriber whose cursor is cursor:
// always when there is no cursor or the epochs differ (the gateway signals that loss), else
// only when its sequence number is higher. Ids that do not parse are new (never dropped
// silently).
func IsAfter(id, cursor string) bool {
	if cursor == "" {
		return true
	}
	a, okA := ParseCursor(id)
	b, okB := ParseCursor(cursor)
	if !okA || !okB || a.Epoch != b.Epoch {
		return true
	}
	return compareSeq(a.Seq, b.Seq) > 0
}

// sameEpoch reports whether two cursors are of one life of a stream.
func sameEpoch(a, b string) bool {
	x, okX := ParseCursor(a)
	y, okY := ParseCursor(b)
	return okX && okY && x.Epoch == y.Epoch
}

// ParseResumeList parses `topic=cursor,topic=cursor` (SSE ids, long-poll cursors), in order;
// malformed entries are skipped.
func ParseResumeList(text string) []TopicCursor {
	var out []TopicCursor
	for _, entry := range strings.Split(text, ",") {
		topic, cursor, ok := strings.Cut(entry, "=")
		topic, cursor = strings.TrimSpace(topic), strings.TrimSpace(cursor)
		if !ok || !ValidTopic(topic) {
			continue
		}
		if _, ok := ParseCursor(cursor); ok {
			out = append(out, TopicCursor{Topic: topic, Cursor: cursor})
		}
	}
	return out
}

// FormatResumeList writes a resume list of the entries that have a cursor.
func FormatResumeList(list []TopicCursor) string {
	var b strings.Builder
	for _, tc := range list {
		if tc.Cursor == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tc.Topic)
		b.WriteByte('=')
		b.WriteString(tc.Cursor)
	}
	return b.String()
}

// TopicCursor is one entry of a resume list.
type TopicCursor struct {
	Topic  string
	Cursor string
}

// ---- what the gateway sends ----

// frame is one thing a connection received, whatever its transport: a WebSocket frame, an
// SSE block or an entry of a poll answer, in the shape of the WebSocket JSON frame.
type frame struct {
	Type   string            `json:"type"`
	Topic  string            `json:"topic,omitempty"`
	ID     string            `json:"id,omitempty"`
	Event  string            `json:"event,omitempty"`
	Delta  bool              `json:"delta,omitempty"` // data is a Fossil delta (delta.go)
	Data   json.RawMessage   `json:"data,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Code   string            `json:"code,omitempty"`
	Topics []string          `json:"topics,omitempty"`
	Cursor map[string]string `json:"cursors,omitempty"`
	By     string            `json:"by,omitempty"`
	// Join and leave (members).
	Conn      string          `json:"conn,omitempty"`
	Node      string          `json:"node,omitempty"`
	Transport string          `json:"transport,omitempty"`
	User      *string         `json:"user,omitempty"`
	Info      json.RawMessage `json:"info,omitempty"`
	// authenticated
	Sub     string `json:"sub,omitempty"`
	Expires int64  `json:"expires,omitempty"`
	// msgpack: the payload as its publisher sent it (MessagePack connections only).
	raw []byte
	// src: the JSON frame's text (the base of a delta is read from it).
	src []byte
}

// errMalformed marks a frame or block the client cannot read: reported as an error event and
// the connection is made again (cursors kept).
var errMalformed = errors.New("heraldpush: malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// check refuses frames that lack what their type needs.
func (f *frame) check() error {
	switch f.Type {
	case "":
		return malformed("a frame without a type")
	case "message":
		if !ValidTopic(f.Topic) {
			return malformed("message with a bad topic %q", f.Topic)
		}
		if _, ok := ParseCursor(f.ID); !ok {
			return malformed("message with a bad id %q", f.ID)
		}
		if f.Data == nil {
			return malformed("message without data")
		}
	case "lost":
		if f.Topic == "" || f.Reason == "" {
			return malformed("loss signal without topic or reason")
		}
	}
	return nil
}

// jsonToValue reads JSON into plain values for MessagePack: integers stay integers, other
// numbers are float64, objects keep string keys.
func jsonToValue(j json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return fromNumbers(v), nil
}

func fromNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return u
		}
		f, _ := v.Float64()
		return f
	case []any:
		for i := range v {
			v[i] = fromNumbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = fromNumbers(v[k])
		}
	}
	return v
}

// ---- what the client sends (WebSocket) ----

// command is one client → server WebSocket frame.
type command struct {
	Type    string            `json:"type" msgpack:"type"`
	Topics  []string          `json:"topics,omitempty" msgpack:"topics,omitempty"`
	Cursors map[string]string `json:"cursors,omitempty" msgpack:"cursors,omitempty"`
	Topic   string            `json:"topic,omitempty" msgpack:"topic,omitempty"`
	Data    json.RawMessage   `json:"data,omitempty" msgpack:"-"`
	Event   string            `json:"event,omitempty" msgpack:"event,omitempty"`
	Token   string            `json:"token,omitempty" msgpack:"token,omitempty"`
	Delta   string            `json:"delta,omitempty" msgpack:"delta,omitempty"`
}

func subscribeCommand(topics []string, cursors map[string]string) command {
	return command{Type: "subscribe", Topics: topics, Cursors: cursors}
}

// deltaSubscribeCommand subscribes asking for Fossil deltas.
func deltaSubscribeCommand(topics []string, cursors map[string]string) command {
	return command{Type: "subscribe", Topics: topics, Cursors: cursors, Delta: DeltaFossil}
}

func unsubscribeCommand(topics []string) command {
	return command{Type: "unsubscribe", Topics: topics}
}

func publishCommand(topic string, data json.RawMessage, event string) command {
	return command{Type: "publish", Topic: topic, Data: data, Event: event}
}

func authCommand(token string) command { return command{Type: "auth", Token: token} }

// encodeJSON writes a command as a JSON text frame.
func (c command) encodeJSON() ([]byte, error) { return json.Marshal(c) }

// encodeMsgpack writes a command as a MessagePack binary frame; `data` goes as the
// MessagePack form of its JSON (integers as integers).
func (c command) encodeMsgpack() ([]byte, error) {
	m := map[string]any{"type": c.Type}
	if c.Topics != nil {
		m["topics"] = c.Topics
	}
	if c.Cursors != nil {
		m["cursors"] = c.Cursors
	}
	if c.Topic != "" {
		m["topic"] = c.Topic
	}
	if c.Event != "" {
		m["event"] = c.Event
	}
	if c.Token != "" {
		m["token"] = c.Token
	}
	if c.Delta != "" {
		m["delta"] = c.Delta
	}
	if c.Data != nil {
		v, err := jsonToValue(c.Data)
		if err != nil {
			return nil, fmt.Errorf("heraldpush: data is not JSON: %w", err)
		}
		m["data"] = v
	}
	return msgpack.Marshal(m)
}
