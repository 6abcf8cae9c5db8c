// Package heraldpush is a client for Herald, a real-time push gateway.
//
// One connection carries every subscription. The client uses the first transport of
// Options.Transports that gets through (WebSocket, then Server-Sent Events, then long-poll
// by default), falls back to the next when one cannot connect or is cut off at once, and
// tries the preferred one again every Options.UpgradeInterval. It keeps one cursor per topic
// and resumes from it on every reconnect, on every transport and on every gateway URL given
// (the nodes of a cluster), so the application sees every message once and in order, or an
// explicit *Lost event naming the topic and the gateway's reason.
//
// Everything the client has to say arrives on one channel, Client.Events: messages, loss
// signals, state changes, errors it handles itself. The channel is bounded
// (Options.EventBuffer); while it is full the connection waits for the application (the
// gateway then applies its lag policy, which may end in a *Lost with reason "lagged"). It is
// closed once the client is closed and none of its goroutines is left.
//
// Where things are: wire.go is the protocol (frames, cursors, the loss signal); store.go
// the subscriptions and cursors; connector.go the connection's life (connect, fall back,
// reconnect, probe back up); ws.go, sse.go and poll.go the transports; http.go history and
// publishing over HTTP; admin.go the admin API client.
package heraldpush

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a Client. Only URLs is required.
type Options struct {
	// URLs are the gateway's base URLs (`https://push.example.com`), the nodes of a cluster
	// tried in order when one fails.
	URLs []string
	// Topics to subscribe to from the start: topic names, or prefix patterns (`orders.*`).
	Topics []string
	// Cursors to resume from (topic → `<epoch>-<seq>`), e.g. saved from Client.Cursors by an
	// earlier run.
	Cursors map[string]string
	// Transports to try, in order (default WebSocket, SSE, LongPoll).
	Transports []Transport
	// MsgPack speaks MessagePack on the WebSocket (subprotocol `herald.msgpack`).
	MsgPack bool
	// Compression offers permessage-deflate on the WebSocket (each message compressed on its
	// own, as the gateway does; it sends frames under 256 bytes, and MessagePack frames,
	// uncompressed). Off by default, and best left off: the gateway does not make batch
	// frames on a connection that took permessage-deflate (each message is compressed once
	// for all its subscribers), and compressing cost the node about 35 % of its CPU per
	// message at 10k msg/s, for payloads that are mostly small.
	Compression bool
	// NoBatch: do not ask for batch frames. By default the WebSocket asks (`batch=1`): the
	// gateway then packs the messages it has ready for the connection into one frame, a JSON
	// array or a MessagePack array of the usual frames, which the client reads element by
	// element, each as if it had come alone; every per-frame cost (a read, a wake-up) is paid
	// once per batch. Stats().Batches counts them.
	NoBatch bool
	// Token is a JWT for private topics and publishing.
	Token string
	// TokenFunc, when set, gives the token (it must return when ctx is done): called before
	// the first connection, again TokenRefreshMargin before the token's `exp`, after the
	// gateway said it expired, and once when the gateway refuses one as invalid. "" means no
	// token (anonymous).
	TokenFunc func(ctx context.Context) (string, error)
	// TokenRefreshMargin (default 30 s).
	TokenRefreshMargin time.Duration
	// DropPersonalTopic: the personal topic `user:<sub>` (where the application's
	// POST /v1/users/{user}/send messages arrive) ends with the connection, like any
	// server-side subscription. By default, once the application subscribed a connection to
	// it, the client keeps it: every later connection subscribes it again from its cursor, so
	// that nothing sent meanwhile is missed.
	DropPersonalTopic bool
	// APIKey is sent as `x-api-key` by Publish over HTTP (services, not end users).
	APIKey string
	// Backoff of reconnects (default 500 ms to 30 s, jittered).
	Backoff Backoff
	// HeartbeatTimeout: a connection from which nothing arrived for this long is dead and is
	// made again (default 40 s). The WebSocket pings the gateway when it has been quiet for
	// half of it; SSE asks the gateway for a heartbeat every half of it (the gateway's bounds
	// are 5 s to 5 min, so an SSE stream is given at least 2 heartbeats and a second).
	HeartbeatTimeout time.Duration
	// OpenTimeout is the longest wait for a connection to open (default 10 s).
	OpenTimeout time.Duration
	// StableAfter: a connection cut before it was open this long counts as a failure of its
	// transport (the next attempt uses the next URL, then the next transport) (default 5 s).
	StableAfter time.Duration
	// UpgradeInterval: while on a fallback, try the preferred transport this often
	// (default 30 s).
	UpgradeInterval time.Duration
	// PollTimeout is how long a long-poll is held (default 25 s; the gateway caps it, and
	// the client holds one at most half of HeartbeatTimeout, in whole seconds).
	PollTimeout time.Duration
	// EventBuffer is the capacity of the Events channel (default 256).
	EventBuffer int
	// MaxFrameBytes bounds one WebSocket frame, one SSE line or block, and one HTTP answer
	// read (default 4 MiB).
	MaxFrameBytes int
	// HTTPClient for the WebSocket handshake, SSE, long-poll, history and publish (default:
	// a client of its own). Without a Timeout: streams and polls are long; the client bounds
	// each itself.
	HTTPClient *http.Client
	// Random gives numbers in [0, 1) for the backoff's jitter (tests).
	Random func() float64
	// Delta: DeltaFossil asks for Fossil deltas (docs/protocol.md "Delta compression") on
	// Topics; SubscribeWith asks for later ones. See SubscribeOptions.Delta.
	Delta string
}

// SubscribeOptions are the options of SubscribeWith.
type SubscribeOptions struct {
	// Delta: DeltaFossil asks for Fossil deltas on these topics (their namespace must allow
	// them, else the gateway refuses the subscription: delta_not_allowed). The client
	// applies them: a Message always holds the full data. A WebSocket asks per topic; SSE
	// and long-poll ask per connection, so only while every topic and pattern subscribed
	// asks. A delta that does not apply is counted (Stats), reported (an ErrorEvent with a
	// *DeltaError), never delivered, and its topic is subscribed again from its cursor, so
	// the message comes again in full.
	Delta string
}

func (o *Options) defaults() {
	if len(o.Transports) == 0 {
		o.Transports = []Transport{WebSocket, SSE, LongPoll}
	}
	if o.TokenRefreshMargin <= 0 {
		o.TokenRefreshMargin = 30 * time.Second
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = 40 * time.Second
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 10 * time.Second
	}
	if o.StableAfter <= 0 {
		o.StableAfter = 5 * time.Second
	}
	if o.UpgradeInterval <= 0 {
		o.UpgradeInterval = 30 * time.Second
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 25 * time.Second
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = 256
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = 4 << 20
	}
}

// Client is a connection to Herald that reconnects by itself. Its methods may be called from
// any goroutine.
type Client struct {
	opts    Options
	ownHTTP bool // HTTPClient is the client's own: its idle connections close with it
	urls    []*url.URL
	store   *store
	tokens  *tokens
	retry   *reconnects

	ctx    context.Context // canceled by Close (or a final refusal)
	cancel context.CancelFunc
	wg     sync.WaitGroup

	events    chan Event
	deliverMu sync.Mutex // one delivery at a time, in order
	notes     chan note
	changed   chan struct{}

	stats stats

	mu        sync.Mutex
	state     State
	transport Transport
	current   *handle // the connection, open or opening
}

// New checks the options and starts connecting at once, in the background.
func New(opts Options) (*Client, error) {
	opts.defaults()
	ownHTTP := opts.HTTPClient == nil
	if ownHTTP {
		opts.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if len(opts.URLs) == 0 {
		return nil, errors.New("heraldpush: give at least one gateway URL")
	}
	var urls []*url.URL
	for _, raw := range opts.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("heraldpush: bad gateway URL %q: want http(s)://host[:port]", raw)
		}
		urls = append(urls, u)
	}
	for _, t := range opts.Transports {
		if t != WebSocket && t != SSE && t != LongPoll {
			return nil, fmt.Errorf("heraldpush: unknown transport %q", t)
		}
	}
	for _, n := range opts.Topics {
		if err := CheckSubscription(n); err != nil {
			return nil, err
		}
	}
	if opts.Delta != "" && opts.Delta != DeltaFossil {
		return nil, fmt.Errorf("heraldpush: unknown delta %q (only %q)", opts.Delta, DeltaFossil)
	}
	for t, cur := range opts.Cursors {
		if _, ok := ParseCursor(cur); !ok || !ValidTopic(t) {
			return nil, fmt.Errorf("heraldpush: bad cursor %q for %q: want a topic and `<epoch>-<seq>`", cur, t)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		opts:    opts,
		ownHTTP: ownHTTP,
		urls:    urls,
		store:   newStore(opts.Topics, opts.Cursors),
		tokens:  &tokens{static: opts.Token, fn: opts.TokenFunc},
		retry:   newReconnects(len(urls), len(opts.Transports), opts.Backoff, opts.Random),
		ctx:     ctx,
		cancel:  cancel,
		events:  make(chan Event, opts.EventBuffer),
		notes:   make(chan note),
		changed: make(chan struct{}, 1),
		state:   StateConnecting,
	}
	if opts.Delta == DeltaFossil {
		for _, n := range opts.Topics {
			c.store.delta[n] = true
		}
	}
	c.wg.Add(1)
	go c.loop()
	return c, nil
}

// Events is where everything the client has to say arrives, in order: *Message, *Lost,
// *StateChange, *ErrorEvent, *MemberEvent, *ServerSubscription. Read it steadily: it holds
// Options.EventBuffer events, and the connection waits while it is full. It is closed once
// the client is closed (by Close, or by a refusal that retrying cannot fix: a *StateChange
// to StateClosed comes first, after an *ErrorEvent saying why).
func (c *Client) Events() <-chan Event { return c.events }

// State is the connection's state and the transport in use (or being tried).
func (c *Client) State() (State, Transport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.transport
}

// Subscribe adds topics or prefix patterns (`orders.*`). The connection subscribes at once
// (WebSocket) or is made again with them (SSE, long-poll), from the cursors held.
func (c *Client) Subscribe(names ...string) error {
	for _, n := range names {
		if err := CheckSubscription(n); err != nil {
			return err
		}
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.store.mu.Lock()
	changed := c.store.add(names...)
	c.store.mu.Unlock()
	if changed {
		c.topicsChanged()
	}
	return nil
}

// SubscribeWith is Subscribe with options (Fossil deltas). The options apply to the names
// not subscribed yet.
func (c *Client) SubscribeWith(o SubscribeOptions, names ...string) error {
	if o.Delta != "" && o.Delta != DeltaFossil {
		return fmt.Errorf("heraldpush: unknown delta %q (only %q)", o.Delta, DeltaFossil)
	}
	for _, n := range names {
		if err := CheckSubscription(n); err != nil {
			return err
		}
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.store.mu.Lock()
	for _, n := range names {
		if o.Delta == DeltaFossil && !slices.Contains(c.store.names, n) {
			c.store.delta[n] = true
		}
	}
	changed := c.store.add(names...)
	c.store.mu.Unlock()
	if changed {
		c.topicsChanged()
	}
	return nil
}

// Stats are the client's counters: deltas applied, those that could not be, and the
// WebSocket batch frames received.
func (c *Client) Stats() Stats {
	return Stats{Deltas: c.stats.deltas.Load(), DeltaFailures: c.stats.deltaFailures.Load(), Batches: c.stats.batches.Load()}
}

// Unsubscribe drops topics or patterns (and the cursors only they held).
func (c *Client) Unsubscribe(names ...string) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.store.mu.Lock()
	changed := c.store.remove(names...)
	c.store.mu.Unlock()
	if changed {
		c.topicsChanged()
	}
	return nil
}

func (c *Client) topicsChanged() {
	select {
	case c.changed <- struct{}{}:
	default: // one pending change reads the current topics anyway
	}
}

// Cursors is every cursor the client holds (topic → id of the last message delivered, or
// the topic's starting position): what to give Options.Cursors to resume later.
func (c *Client) Cursors() map[string]string { return c.store.cursorsCopy() }

// Cursor is one topic's cursor ("" when none).
func (c *Client) Cursor(topic string) string { return c.store.cursor(topic) }

// WaitConnected waits until a connection is open, the client is closed, or ctx is done.
func (c *Client) WaitConnected(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if s, _ := c.State(); s == StateConnected {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("heraldpush: waiting for a connection: %w", ctx.Err())
		case <-c.ctx.Done():
			return ErrClosed
		case <-t.C:
		}
	}
}

// Publish publishes data (any value encoding/json can marshal; json.RawMessage as it is) to
// topic: over the WebSocket when it is open (the token's `publish` claim, or dev mode, must
// allow it), else with POST /v1/publish on the gateway (a token or Options.APIKey).
func (c *Client) Publish(ctx context.Context, topic string, data any) (PublishResult, error) {
	return c.PublishEvent(ctx, topic, "", data)
}

// PublishEvent is Publish with an event name.
func (c *Client) PublishEvent(ctx context.Context, topic, event string, data any) (PublishResult, error) {
	if !ValidTopic(topic) {
		return PublishResult{}, fmt.Errorf("heraldpush: bad topic %q", topic)
	}
	if c.ctx.Err() != nil {
		return PublishResult{}, ErrClosed
	}
	raw, err := marshalData(data)
	if err != nil {
		return PublishResult{}, err
	}
	c.mu.Lock()
	h := c.current
	open := c.state == StateConnected
	c.mu.Unlock()
	if h != nil && open && h.transport == WebSocket {
		r, err := h.conn.publish(ctx, topic, raw, event)
		if !errors.Is(err, errNotOpen) {
			return r, err
		}
	}
	token, err := c.tokens.get(ctx)
	if err != nil {
		return PublishResult{}, err
	}
	return publishHTTP(ctx, c.opts.HTTPClient, c.baseURL(), token, c.opts.APIKey, topic, event, raw, c.opts.MaxFrameBytes)
}

// HistoryOptions select a page of history.
type HistoryOptions struct {
	// Since is a message id of the topic: the page starts after it ("" for the newest).
	Since string
	// Limit is the most messages in the page, 1 to 1000 (0: the gateway's 100).
	Limit int
}

// History reads a page of a topic's history from the gateway (with the client's token).
func (c *Client) History(ctx context.Context, topic string, o HistoryOptions) (*HistoryPage, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	token, err := c.tokens.get(ctx)
	if err != nil {
		return nil, err
	}
	return history(ctx, c.opts.HTTPClient, c.baseURL(), token, "", topic, o, c.opts.MaxFrameBytes)
}

// baseURL is the gateway URL connected to, or to be connected to next.
func (c *Client) baseURL() *url.URL {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil {
		return c.current.url
	}
	return c.urls[0]
}

// Close closes the connection for good and returns once none of the client's goroutines is
// left (within about a second: a WebSocket's closing handshake is given that long). The
// Events channel is closed then.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	if c.ownHTTP {
		c.opts.HTTPClient.CloseIdleConnections()
	}
	return nil
}

// emit hands an event to the application, waiting while the channel is full; it fails when
// ctx is done (the connection that reports it ended, or the client closed).
func (c *Client) emit(ctx context.Context, ev Event) error {
	select {
	case c.events <- ev:
		return nil
	default:
	}
	select {
	case c.events <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func marshalData(data any) (json.RawMessage, error) {
	switch d := data.(type) {
	case json.RawMessage:
		if !json.Valid(d) {
			return nil, errors.New("heraldpush: data is not valid JSON")
		}
		return bytes.Clone(d), nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("heraldpush: data: %w", err)
	}
	return b, nil
}

// tokens keeps the current token: a fixed one, or TokenFunc's.
type tokens struct {
	mu      sync.Mutex
	static  string
	fn      func(ctx context.Context) (string, error)
	current string
	retried bool // a refused token was replaced once already since a connection opened
}

// get is the current token, fetched when there is none ("" when none is configured).
func (t *tokens) get(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fn == nil {
		return t.static, nil
	}
	if t.current != "" {
		return t.current, nil
	}
	tok, err := t.fn(ctx)
	if err != nil {
		return "", fmt.Errorf("heraldpush: token function: %w", err)
	}
	// "" is no token (anonymous), asked for again next time.
	t.current = tok
	return tok, nil
}

// refresh fetches a fresh token (TokenFunc only).
func (t *tokens) refresh(ctx context.Context) (string, error) {
	t.mu.Lock()
	t.current = ""
	t.mu.Unlock()
	return t.get(ctx)
}

// peek is the token held, without fetching.
func (t *tokens) peek() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fn == nil {
		return t.static
	}
	return t.current
}

// expired: the next connection fetches another first.
func (t *tokens) expired() {
	t.mu.Lock()
	t.current = ""
	t.mu.Unlock()
}

// retryRefused: the gateway refused the token; whether to try once more with a fresh one.
func (t *tokens) retryRefused() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fn == nil || t.retried {
		return false
	}
	t.retried = true
	t.current = ""
	return true
}

func (t *tokens) accepted() {
	t.mu.Lock()
	t.retried = false
	t.mu.Unlock()
}

// tokenExpiry is a JWT's `exp` claim, if it has one.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := decodeSegment(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*claims.Exp), 0), true
}

// personalTopic is `user:<sub>` of a JWT's `sub` claim ("" when it has none).
func personalTopic(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := decodeSegment(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Sub == "" || !ValidTopic("user:"+claims.Sub) {
		return ""
	}
	return "user:" + claims.Sub
}
