package heraldpush

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Transport is a way of connecting to the gateway.
type Transport string

// The transports, in the order a client tries them by default.
const (
	WebSocket Transport = "ws"
	SSE       Transport = "sse"
	LongPoll  Transport = "poll"
)

// State is the connection's state, as StateChange events report it.
type State string

// The states. A client starts Connecting, is Connected while a connection delivers,
// Disconnected while it waits to reconnect, and Closed for good after Close or a refusal
// that retrying cannot fix.
const (
	StateConnecting   State = "connecting"
	StateConnected    State = "connected"
	StateDisconnected State = "disconnected"
	StateClosed       State = "closed"
)

// Event is what Client.Events delivers: *Message, *Lost, *StateChange, *ErrorEvent,
// *MemberEvent or *ServerSubscription.
type Event interface{ isEvent() }

// Message is a message of a subscribed topic, the same on every transport.
type Message struct {
	// Topic it was published to (`orders.eu`, also when a pattern such as `orders.*`
	// delivered it).
	Topic string
	// ID is its position in the topic's stream, `<epoch>-<seq>`: the id the publish API
	// returned, and the topic's cursor once delivered.
	ID string
	// Event is the event name the publisher gave; "" when it named none.
	Event string
	// Data is the payload's JSON form (on a MessagePack WebSocket the client makes it as the
	// gateway does for other transports: `bin` as base64; object keys come out sorted).
	Data json.RawMessage
	// MsgPack is the payload as MessagePack, exactly as the gateway sent it, on a
	// MessagePack WebSocket (Options.MsgPack); nil otherwise.
	MsgPack []byte
	// Server is true for a topic the application subscribed the connection to (admin API
	// subscribe or send), not the client.
	Server bool
}

// Decode unmarshals the payload's JSON form into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Data, v) }

// Lost is the gateway's loss signal: messages of Topic were lost.
type Lost struct {
	// Topic, or a pattern (`orders.*`) when the client fell behind the pattern's live stream
	// as a whole.
	Topic string
	// Reason: LostExpired, LostEpoch or LostLagged.
	Reason string
}

// StateChange reports a new state, and the transport in use (Connected) or being tried
// (Connecting); "" otherwise.
type StateChange struct {
	State     State
	Transport Transport
}

// ErrorEvent reports an error that the client handles itself (a failed attempt, a malformed
// frame, a refusal): the client reconnects unless the state becomes Closed. Err is an *Error
// for the gateway's refusals, a *CloseError for a WebSocket close code.
type ErrorEvent struct{ Err error }

// MemberEvent is a member joining or leaving a subscribed topic, in a namespace that
// announces them.
type MemberEvent struct {
	Joined    bool // true: join; false: leave
	Topic     string
	Conn      string
	Node      string
	Transport string
	User      *string // nil when anonymous
	Info      json.RawMessage
}

// ServerSubscription reports topics the application subscribed this connection to
// (Subscribed) or dropped (admin API); their messages arrive with Message.Server set.
type ServerSubscription struct {
	Subscribed bool
	Topics     []string
}

func (*Message) isEvent()            {}
func (*Lost) isEvent()               {}
func (*StateChange) isEvent()        {}
func (*ErrorEvent) isEvent()         {}
func (*MemberEvent) isEvent()        {}
func (*ServerSubscription) isEvent() {}

// Error is a refusal by the gateway, with its stable code and its reason.
type Error struct {
	// Status is the HTTP status, 0 when the refusal came in a WebSocket frame.
	Status int
	// Code is the gateway's code (`forbidden`, `bad_topic`, `invalid_token`, ...).
	Code string
	// Reason is the gateway's reason, for people.
	Reason string
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("heraldpush: %s: %s (HTTP %d)", e.Code, e.Reason, e.Status)
	}
	return fmt.Sprintf("heraldpush: %s: %s", e.Code, e.Reason)
}

// CloseError is a WebSocket closed by the gateway with a close code (1008 `token expired`,
// 1012 restarting, 4000/4001 ended by the application, ...).
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("heraldpush: WebSocket closed: %d %s", e.Code, e.Reason)
}

// ErrClosed is returned by calls on a closed client.
var ErrClosed = errors.New("heraldpush: client closed")

// ErrNotConnected is returned by Publish when no connection can carry it and no HTTP
// publishing is possible.
var ErrNotConnected = errors.New("heraldpush: not connected")

// PublishResult is the gateway's answer to a publish.
type PublishResult struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
}

// HistoryPage is a page of a topic's history (GET /v1/topics/{topic}/history).
type HistoryPage struct {
	Topic    string
	Messages []Message
	// Lost is LostExpired or LostEpoch when messages after Since were lost; "" otherwise.
	Lost string
	// More: ask again with Since = Next.
	More bool
	Next string
}
