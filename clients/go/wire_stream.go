package heraldpush

// The wire, continued (wire.go has the rest): the event stream (its parser, and what each of
// Herald's blocks says) and the long-poll answer, as docs/protocol.md defines them.

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// ---- SSE ----

// sseParser splits an event stream into blocks. Lines end with CR, LF or CRLF, also across
// chunks; a line or a block longer than max bytes is an error.
type sseParser struct {
	max     int
	line    []byte
	data    []byte
	hasData bool
	event   string
	id      *string
	sawCR   bool
	retry   func(ms int64)
}

func (p *sseParser) push(chunk []byte, emit func(sseBlock) error) error {
	for _, c := range chunk {
		if p.sawCR {
			p.sawCR = false
			if c == '\n' {
				continue
			}
		}
		if c == '\n' || c == '\r' {
			p.sawCR = c == '\r'
			if err := p.endLine(emit); err != nil {
				return err
			}
			continue
		}
		p.line = append(p.line, c)
		if len(p.line) > p.max {
			return malformed("an event-stream line over %d bytes", p.max)
		}
	}
	return nil
}

func (p *sseParser) endLine(emit func(sseBlock) error) error {
	line := p.line
	p.line = p.line[:0]
	if len(line) == 0 {
		return p.dispatch(emit)
	}
	if line[0] == ':' {
		return nil
	}
	field, value := string(line), ""
	for i, c := range line {
		if c == ':' {
			field = string(line[:i])
			v := line[i+1:]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			value = string(v)
			break
		}
	}
	switch field {
	case "data":
		if p.hasData {
			p.data = append(p.data, '\n')
		}
		p.data = append(p.data, value...)
		p.hasData = true
		if len(p.data) > p.max {
			return malformed("an event over %d bytes", p.max)
		}
	case "event":
		p.event = value
	case "id":
		v := value
		p.id = &v
	case "retry":
		if ms, err := strconv.ParseInt(value, 10, 64); err == nil && p.retry != nil {
			p.retry(ms)
		}
	}
	return nil
}

func (p *sseParser) dispatch(emit func(sseBlock) error) error {
	b := sseBlock{Event: p.event, Data: string(p.data), ID: p.id}
	has := p.hasData
	p.data, p.hasData, p.event, p.id = p.data[:0], false, "", nil
	if !has && b.ID == nil {
		return nil
	}
	if b.Event == "" {
		b.Event = "message"
	}
	if !has {
		b.Event = ""
	}
	return emit(b)
}

// sseBlock is one dispatched event-stream block.
type sseBlock struct {
	Event string  // "message" when the block named none; "" for a block without data
	Data  string  // the data lines, joined with "\n"
	ID    *string // the block's `id:` field, if it had one
}

// What a block of Herald's stream says (sseEvent.kind).
const (
	ssePositions        = iota // an id and no data: the opening block (every topic's position)
	sseMessage                 // a message (the JSON form)
	sseLostSignal              // herald.lost: the id says where delivery goes on
	sseSubscribed              // herald.subscribed: the application subscribed the stream
	sseUnsubscribed            // herald.unsubscribed
	sseMember                  // herald.join / herald.leave
	sseShutdownSignal          // herald.shutdown: the node drains; the stream ends
	sseDisconnectSignal        // herald.disconnect: the stream ends
	sseIgnored                 // an event this client does not know
)

// sseEvent is what one block of Herald's stream says.
type sseEvent struct {
	kind int
	// positions: the topics' positions named by the block's id (for a loss signal, those of
	// the other topics).
	positions []TopicCursor
	frame     frame // sseMessage, sseMember (Type "join" or "leave")
	lost      sseLost
	lostAt    string        // where delivery of lost.Topic goes on ("" when the id does not say)
	topics    []string      // sseSubscribed, sseUnsubscribed
	retry     time.Duration // sseShutdownSignal: come back after this (0: no hint)
	reason    string        // sseDisconnectSignal
	reconnect bool          // sseDisconnectSignal: false means stay away (logged out, banned)
}

// decodeSSEBlock reads one block of a `format=json` stream.
func decodeSSEBlock(b sseBlock) (sseEvent, error) {
	var ev sseEvent
	if b.ID != nil {
		ev.positions = ParseResumeList(*b.ID)
	}
	switch b.Event {
	case "":
		ev.kind = ssePositions
	case "message":
		ev.kind = sseMessage
		f, err := decodeJSONFrame([]byte(b.Data))
		if err != nil {
			return ev, err
		}
		if f.Type != "message" {
			return ev, malformed("an SSE message of type %q", f.Type)
		}
		ev.frame = f
		ev.positions = nil // the message's own id moves its topic
	case "herald.lost":
		ev.kind = sseLostSignal
		if err := json.Unmarshal([]byte(b.Data), &ev.lost); err != nil || ev.lost.Topic == "" || ev.lost.Reason == "" {
			return ev, malformed("herald.lost: %q", b.Data)
		}
		rest := ev.positions[:0:0]
		for _, tc := range ev.positions {
			if tc.Topic == ev.lost.Topic {
				ev.lostAt = tc.Cursor
			} else {
				rest = append(rest, tc)
			}
		}
		ev.positions = rest
	case "herald.subscribed", "herald.unsubscribed":
		ev.kind = sseSubscribed
		if b.Event == "herald.unsubscribed" {
			ev.kind = sseUnsubscribed
		}
		var t sseTopics
		if err := json.Unmarshal([]byte(b.Data), &t); err != nil {
			return ev, malformed("%s: %q", b.Event, b.Data)
		}
		ev.topics = t.Topics
	case "herald.join", "herald.leave":
		ev.kind = sseMember
		var f frame
		if err := json.Unmarshal([]byte(b.Data), &f); err != nil || f.Topic == "" {
			return ev, malformed("%s: %q", b.Event, b.Data)
		}
		f.Type = strings.TrimPrefix(b.Event, "herald.")
		ev.frame = f
		ev.positions = nil
	case "herald.shutdown":
		ev.kind = sseShutdownSignal
		var sd sseShutdown
		_ = json.Unmarshal([]byte(b.Data), &sd)
		if sd.RetryMS != nil && *sd.RetryMS > 0 {
			ev.retry = time.Duration(*sd.RetryMS) * time.Millisecond
		}
	case "herald.disconnect":
		ev.kind = sseDisconnectSignal
		var d sseDisconnect
		_ = json.Unmarshal([]byte(b.Data), &d)
		ev.reason, ev.reconnect = d.Reason, d.Reconnect == nil || *d.Reconnect
		if ev.reason == "" {
			ev.reason = "disconnected"
		}
	default:
		ev.kind = sseIgnored
	}
	return ev, nil
}

// sseLost is the data of `herald.lost`, and an entry of a poll answer's `lost`.
type sseLost struct {
	Topic  string `json:"topic"`
	Reason string `json:"reason"`
}

// sseShutdown is the data of `herald.shutdown`.
type sseShutdown struct {
	RetryMS *int64 `json:"retry_ms"`
}

// sseDisconnect is the data of `herald.disconnect`, and a poll answer's `disconnect`.
type sseDisconnect struct {
	Reason    string `json:"reason"`
	Reconnect *bool  `json:"reconnect"`
	Topic     string `json:"topic"`
}

// sseTopics is the data of `herald.subscribed` / `herald.unsubscribed`.
type sseTopics struct {
	Topics []string `json:"topics"`
}

// ---- long-poll ----

// pollAnswer is the body of a `GET /v1/poll` answer.
type pollAnswer struct {
	Messages   []json.RawMessage `json:"messages"`
	Lost       []sseLost         `json:"lost"`
	Cursor     string            `json:"cursor"`
	More       bool              `json:"more"`
	Presence   []json.RawMessage `json:"presence"`
	Disconnect *sseDisconnect    `json:"disconnect"`
}

// pollResult is what a poll answer says, in the order to apply it.
type pollResult struct {
	// lost: loss signals first, each with where its topic goes on: the batch's first
	// message of the topic when it has one (at ""), else the answer's cursor.
	lost []struct{ topic, reason, at string }
	// messages, in order.
	messages []frame
	// members: join and leave events.
	members []frame
	// positions: the answer's cursor, where the next poll goes on from.
	positions []TopicCursor
	// disconnect: the application ended the connection (admin API).
	disconnect *struct {
		reason    string
		reconnect bool
	}
}

// decodePollAnswer reads a poll answer.
func decodePollAnswer(body []byte) (pollResult, error) {
	var a pollAnswer
	var r pollResult
	if err := json.Unmarshal(body, &a); err != nil {
		return r, malformed("poll answer: %v", err)
	}
	r.positions = ParseResumeList(a.Cursor)
	with := map[string]bool{}
	for _, raw := range a.Messages {
		f, err := decodeJSONFrame(raw)
		if err != nil {
			return r, err
		}
		if f.Type != "message" {
			return r, malformed("a poll message of type %q", f.Type)
		}
		r.messages = append(r.messages, f)
		with[f.Topic] = true
	}
	for _, l := range a.Lost {
		if l.Topic == "" || l.Reason == "" {
			return r, malformed("a loss signal without topic or reason")
		}
		at := ""
		if !with[l.Topic] {
			for _, tc := range r.positions {
				if tc.Topic == l.Topic {
					at = tc.Cursor
				}
			}
		}
		r.lost = append(r.lost, struct{ topic, reason, at string }{l.Topic, l.Reason, at})
	}
	for _, raw := range a.Presence {
		f, err := decodeJSONFrame(raw)
		if err != nil {
			return r, err
		}
		if f.Type == "join" || f.Type == "leave" {
			r.members = append(r.members, f)
		}
	}
	if a.Disconnect != nil {
		reason := a.Disconnect.Reason
		if reason == "" {
			reason = "disconnected"
		}
		r.disconnect = &struct {
			reason    string
			reconnect bool
		}{reason, a.Disconnect.Reconnect == nil || *a.Disconnect.Reconnect}
	}
	return r, nil
}

// errorBody is the gateway's JSON error `{"code","reason"}`.
type errorBody struct {
	Code   string `json:"code"`
	Reason string `json:"reason"`
}
