package heraldpush

// The admin API client: what the application's backend calls on the admin listener (default
// 127.0.0.1:9090) with an API key (`admin.api_keys`): publish, batches, presence, connections
// of a user, disconnect, send, server-side subscriptions, history and topic stats.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// Admin calls the admin API. The zero value is not usable: make one with NewAdmin.
type Admin struct {
	base   *url.URL
	apiKey string
	hc     *http.Client
	limit  int
}

// NewAdmin is an admin API client for the listener at baseURL (`http://127.0.0.1:9090`),
// sending apiKey as `x-api-key` when it is not empty. hc may be nil (http.DefaultClient).
func NewAdmin(baseURL, apiKey string, hc *http.Client) (*Admin, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("heraldpush: bad admin URL %q", baseURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Admin{base: u, apiKey: apiKey, hc: hc, limit: 16 << 20}, nil
}

// call sends a JSON body (nil: none) and reads the JSON answer into out (nil: ignored).
func (a *Admin) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("heraldpush: admin %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint(a.base, path, q), rd)
	if err != nil {
		return fmt.Errorf("heraldpush: admin %s: %w", path, err)
	}
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	if a.apiKey != "" {
		req.Header.Set("x-api-key", a.apiKey)
	}
	var sink json.RawMessage
	if out == nil {
		out = &sink
	}
	return doJSON(a.hc, req, "admin "+path, a.limit, out)
}

// PublishMessage is one message to publish.
type PublishMessage struct {
	Topic string          `json:"topic"`
	Data  json.RawMessage `json:"data"`
	Event string          `json:"event,omitempty"`
}

// NewPublishMessage marshals data (json.RawMessage as it is) into a PublishMessage.
func NewPublishMessage(topic, event string, data any) (PublishMessage, error) {
	raw, err := marshalData(data)
	return PublishMessage{Topic: topic, Data: raw, Event: event}, err
}

// Publish publishes one message (POST /v1/publish).
func (a *Admin) Publish(ctx context.Context, topic string, data any) (PublishResult, error) {
	return a.PublishEvent(ctx, topic, "", data)
}

// PublishEvent publishes one message with an event name.
func (a *Admin) PublishEvent(ctx context.Context, topic, event string, data any) (PublishResult, error) {
	m, err := NewPublishMessage(topic, event, data)
	if err != nil {
		return PublishResult{}, err
	}
	var r PublishResult
	err = a.call(ctx, http.MethodPost, "/v1/publish", nil, m, &r)
	return r, err
}

// BatchResult is one message's outcome in a batch: an id, or the refusal.
type BatchResult struct {
	Topic string
	ID    string
	Err   *Error // nil when published
}

// PublishBatch publishes up to `limits.max_batch_publish` (100) messages at once
// (POST /v1/publish/batch); each has its own result, in order.
func (a *Admin) PublishBatch(ctx context.Context, messages []PublishMessage) ([]BatchResult, error) {
	var answer struct {
		Results []struct {
			Topic  string `json:"topic"`
			ID     string `json:"id"`
			Code   string `json:"code"`
			Reason string `json:"reason"`
		} `json:"results"`
	}
	if err := a.call(ctx, http.MethodPost, "/v1/publish/batch", nil, map[string]any{"messages": messages}, &answer); err != nil {
		return nil, err
	}
	out := make([]BatchResult, len(answer.Results))
	for i, r := range answer.Results {
		out[i] = BatchResult{Topic: r.Topic, ID: r.ID}
		if r.Code != "" {
			out[i].Err = &Error{Code: r.Code, Reason: r.Reason}
		}
	}
	return out, nil
}

// Presence is a topic's subscriber count across the cluster.
type Presence struct {
	Topic       string           `json:"topic"`
	Subscribers uint64           `json:"subscribers"`
	Nodes       map[string]int64 `json:"nodes"`
}

// Presence counts a topic's subscribers (GET /v1/presence/{topic}).
func (a *Admin) Presence(ctx context.Context, topic string) (*Presence, error) {
	if !ValidTopic(topic) {
		return nil, fmt.Errorf("heraldpush: bad topic %q", topic)
	}
	var p Presence
	if err := a.call(ctx, http.MethodGet, "/v1/presence/"+topic, nil, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Member is one subscriber of a topic.
type Member struct {
	User      *string         `json:"user"`
	Conn      string          `json:"conn"`
	Node      string          `json:"node"`
	Since     json.RawMessage `json:"since"`
	Transport string          `json:"transport"`
	Info      json.RawMessage `json:"info,omitempty"`
}

// MembersPage is a page of a topic's members; Next is the cursor of the next page ("" after
// the last).
type MembersPage struct {
	Topic   string   `json:"topic"`
	Members []Member `json:"members"`
	Next    *string  `json:"next"`
}

// PresenceMembers lists a page of a topic's members (GET /v1/presence/{topic}?members=true),
// limit 1 to 1000 (0: the gateway's 100), cursor "" for the first page.
func (a *Admin) PresenceMembers(ctx context.Context, topic string, limit int, cursor string) (*MembersPage, error) {
	if !ValidTopic(topic) {
		return nil, fmt.Errorf("heraldpush: bad topic %q", topic)
	}
	q := url.Values{"members": {"true"}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var p MembersPage
	if err := a.call(ctx, http.MethodGet, "/v1/presence/"+topic, q, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// UserConnections lists a user's connections (a token's `sub`) per node
// (GET /v1/users/{user}/connections).
func (a *Admin) UserConnections(ctx context.Context, user string) (map[string][]string, error) {
	var answer struct {
		Nodes map[string][]string `json:"nodes"`
	}
	if err := a.call(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(user)+"/connections", nil, nil, &answer); err != nil {
		return nil, err
	}
	return answer.Nodes, nil
}

// Disconnect says why and whether the client should come back.
type Disconnect struct {
	Reason    string `json:"reason,omitempty"`
	Reconnect *bool  `json:"reconnect,omitempty"`
}

// DisconnectUser ends every connection of a user on every node; it returns how many this
// node ended (POST /v1/users/{user}/disconnect).
func (a *Admin) DisconnectUser(ctx context.Context, user string, d Disconnect) (int, error) {
	var answer struct {
		Here int `json:"disconnected_here"`
	}
	err := a.call(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/disconnect", nil, d, &answer)
	return answer.Here, err
}

// DisconnectConnection ends one connection, by its id, on whichever node holds it
// (POST /v1/connections/{id}/disconnect).
func (a *Admin) DisconnectConnection(ctx context.Context, id string, d Disconnect) (int, error) {
	var answer struct {
		Here int `json:"disconnected_here"`
	}
	err := a.call(ctx, http.MethodPost, "/v1/connections/"+url.PathEscape(id)+"/disconnect", nil, d, &answer)
	return answer.Here, err
}

// SubscribeUser subscribes every live connection of a user to topics, from their live head
// (POST /v1/users/{user}/subscribe); it returns how many connections of this node took it.
func (a *Admin) SubscribeUser(ctx context.Context, user string, topics ...string) (int, error) {
	var answer struct {
		Here int `json:"subscribed_here"`
	}
	err := a.call(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/subscribe", nil, map[string]any{"topics": topics}, &answer)
	return answer.Here, err
}

// UnsubscribeUser is the reverse of SubscribeUser (POST /v1/users/{user}/unsubscribe).
func (a *Admin) UnsubscribeUser(ctx context.Context, user string, topics ...string) (int, error) {
	var answer struct {
		Here int `json:"unsubscribed_here"`
	}
	err := a.call(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/unsubscribe", nil, map[string]any{"topics": topics}, &answer)
	return answer.Here, err
}

// SendResult is the answer to a send: the message's topic (`user:<user>`, `conn:<id>`) and
// id, and how many connections of this node it reached.
type SendResult struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	Here  int    `json:"reached_here"`
}

// SendUser sends a message to every connection of a user, on the personal topic
// `user:<user>` (POST /v1/users/{user}/send).
func (a *Admin) SendUser(ctx context.Context, user, event string, data any) (*SendResult, error) {
	return a.send(ctx, "/v1/users/"+url.PathEscape(user)+"/send", event, data)
}

// SendConnection sends a message to one connection, on its topic `conn:<id>`
// (POST /v1/connections/{id}/send).
func (a *Admin) SendConnection(ctx context.Context, id, event string, data any) (*SendResult, error) {
	return a.send(ctx, "/v1/connections/"+url.PathEscape(id)+"/send", event, data)
}

func (a *Admin) send(ctx context.Context, path, event string, data any) (*SendResult, error) {
	raw, err := marshalData(data)
	if err != nil {
		return nil, err
	}
	body := map[string]any{"data": raw}
	if event != "" {
		body["event"] = event
	}
	var r SendResult
	if err := a.call(ctx, http.MethodPost, path, nil, body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// History reads a page of any topic's history (GET /v1/topics/{topic}/history).
func (a *Admin) History(ctx context.Context, topic string, o HistoryOptions) (*HistoryPage, error) {
	return history(ctx, a.hc, a.base, "", a.apiKey, topic, o, a.limit)
}

// TopicStats is one topic's stats on the node (GET /v1/topics/{topic}).
type TopicStats struct {
	Topic       string `json:"topic"`
	Subscribers uint64 `json:"subscribers"`
	Head        string `json:"head"`
	History     uint64 `json:"history"`
	Messages    uint64 `json:"messages"`
}

// Topic reads a topic's stats on the node.
func (a *Admin) Topic(ctx context.Context, topic string) (*TopicStats, error) {
	if !ValidTopic(topic) {
		return nil, fmt.Errorf("heraldpush: bad topic %q", topic)
	}
	var s TopicStats
	if err := a.call(ctx, http.MethodGet, "/v1/topics/"+topic, nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
