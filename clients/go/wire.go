package heraldpush

// The wire: what goes over the connection, as docs/protocol.md defines it. Topic names and
// prefix patterns, cursors and resume lists, the loss signal, the WebSocket frames (JSON and
// MessagePack); the event stream and the long-poll answer are in wire_stream.go. Nothing
// here knows about
// connections, retries or state; the transports (ws.go, sse.go, poll.go) read and write
// through these functions only, so this file can be checked against the protocol on its own.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
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

var (
	topicRe  = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)
	cursorRe = regexp.MustCompile(`^([0-9a-f]{1,16})-([0-9]{1,20})$`)
)

// ValidTopic reports whether name is a topic name: 1-128 characters of A-Z a-z 0-9 _ . : @ -.
func ValidTopic(name string) bool { return topicRe.MatchString(name) }

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

// ParseCursor parses `<epoch>-<seq>`; ok is false when text is not a cursor.
func ParseCursor(text string) (c Cursor, ok bool) {
	m := cursorRe.FindStringSubmatch(text)
	if m == nil {
		return Cursor{}, false
	}
	trim := func(s string) string {
		t := strings.TrimLeft(s, "0")
		if t == "" {
			return "0"
		}
		return t
	}
	return Cursor{Epoch: trim(m[1]), Seq: trim(m[2])}, true
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

// decodeJSONFrame reads a JSON WebSocket frame (or an SSE/poll message object).
func decodeJSONFrame(b []byte) (frame, error) {
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, malformed("not a JSON frame: %v", err)
	}
	f.src = b
	return f, f.check()
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

// decodeMsgpackFrame reads a `herald.msgpack` WebSocket frame: one map with string keys. The
// message's `data` is kept as sent (frame.raw) and given its JSON form (frame.Data).
func decodeMsgpackFrame(b []byte) (frame, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := dec.DecodeMapLen()
	if err != nil || n < 0 {
		return frame{}, malformed("not a MessagePack map")
	}
	var f frame
	str := func() (string, error) {
		v, err := dec.DecodeInterfaceLoose()
		if err != nil {
			return "", err
		}
		switch v := v.(type) {
		case string:
			return v, nil
		case nil:
			return "", nil
		}
		return "", fmt.Errorf("not a string: %T", v)
	}
	for i := 0; i < n; i++ {
		key, err := dec.DecodeString()
		if err != nil {
			return frame{}, malformed("a map key that is not a string")
		}
		var ferr error
		switch key {
		case "type":
			f.Type, ferr = str()
		case "topic":
			f.Topic, ferr = str()
		case "id":
			f.ID, ferr = str()
		case "event":
			f.Event, ferr = str()
		case "reason":
			f.Reason, ferr = str()
		case "code":
			f.Code, ferr = str()
		case "by":
			f.By, ferr = str()
		case "conn":
			f.Conn, ferr = str()
		case "node":
			f.Node, ferr = str()
		case "transport":
			f.Transport, ferr = str()
		case "sub":
			f.Sub, ferr = str()
		case "user":
			var u string
			u, ferr = str()
			if ferr == nil && u != "" {
				f.User = &u
			}
		case "data", "info":
			var raw msgpack.RawMessage
			if raw, ferr = dec.DecodeRaw(); ferr == nil {
				var j []byte
				if j, ferr = msgpackToJSON(raw); ferr == nil {
					if key == "data" {
						f.raw, f.Data = raw, j
					} else {
						f.Info = j
					}
				}
			}
		case "topics":
			var v []string
			ferr = dec.Decode(&v)
			f.Topics = v
		case "cursors":
			var v map[string]string
			ferr = dec.Decode(&v)
			f.Cursor = v
		case "expires":
			f.Expires, ferr = dec.DecodeInt64()
		case "delta":
			f.Delta, ferr = dec.DecodeBool()
		default:
			ferr = dec.Skip()
		}
		if ferr != nil {
			return frame{}, malformed("field %q: %v", key, ferr)
		}
	}
	return f, f.check()
}

// msgpackToJSON gives a MessagePack value its JSON form, as the gateway does: string map keys,
// `bin` as standard padded base64, finite floats, no extension types.
func msgpackToJSON(raw []byte) ([]byte, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(raw))
	dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
	v, err := dec.DecodeInterfaceLoose()
	if err != nil {
		return nil, err
	}
	j, err := jsonForm(v, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

func jsonForm(v any, depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("nested deeper than 64")
	}
	switch v := v.(type) {
	case nil, bool, string, int64, uint64:
		return v, nil
	case int8:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case int:
		return int64(v), nil
	case uint8:
		return uint64(v), nil
	case uint16:
		return uint64(v), nil
	case uint32:
		return uint64(v), nil
	case uint:
		return uint64(v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, errors.New("a float that is not finite")
		}
		return v, nil
	case float32:
		return jsonForm(float64(v), depth)
	case []byte:
		return base64.StdEncoding.EncodeToString(v), nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = jsonForm(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("a map key that is not a string (%T)", k)
			}
			var err error
			if out[ks], err = jsonForm(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			var err error
			if out[k], err = jsonForm(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no JSON form for %T", v)
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
