package heraldpush

// The connection's life: one connection at a time, made again after it ends with backoff on
// the next URL and transport (backoff.go), and, while on a fallback, a probe of the preferred
// transports that takes over once it opens. One goroutine (loop) decides; each connection
// runs in a goroutine of its own and reports to it on c.notes.

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"time"
)

// conn is one connection of one transport.
type conn interface {
	// run connects, subscribes and delivers until the connection ends; it returns why
	// (an *endError, or any error for a plain failure).
	run(ctx context.Context) error
	// update: the subscriptions changed.
	update()
	// refreshToken: a fresh token (WebSocket: an `auth` frame; SSE: a new stream; long-poll:
	// the next poll).
	refreshToken(token string)
	// publish over this connection; errNotOpen when it cannot.
	publish(ctx context.Context, topic string, data json.RawMessage, event string) (PublishResult, error)
}

var errNotOpen = errors.New("heraldpush: the connection cannot publish")

// endError says how a connection ended.
type endError struct {
	err          error
	retry        time.Duration // the server's hint (retry:, retry_ms, retry-after)
	shutdown     bool          // the node drains or restarts: not the transport's fault
	tokenExpired bool          // fetch a fresh token before reconnecting
	fatal        bool          // a refusal not to retry
}

func (e *endError) Error() string { return e.err.Error() }
func (e *endError) Unwrap() error { return e.err }

// handle is a connection the loop started.
type handle struct {
	ti        int
	transport Transport
	url       *url.URL
	conn      conn
	ctx       context.Context
	cancel    context.CancelFunc
	openedAt  time.Time
}

// note is what a connection reports to the loop: it opened, or it ended (err).
type note struct {
	h      *handle
	opened bool
	err    error
	done   chan struct{} // opened: closed once the loop has acted on it
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (c *Client) loop() {
	defer c.wg.Done()
	var main, probe *handle
	live := 0 // connections started and not ended
	retryT := time.NewTimer(0)
	probeT := stoppedTimer()
	tokenT := stoppedTimer()
	defer retryT.Stop()
	defer probeT.Stop()
	defer tokenT.Stop()

	start := func(ti int, u *url.URL) *handle {
		h := &handle{ti: ti, transport: c.opts.Transports[ti], url: u}
		h.ctx, h.cancel = context.WithCancel(c.ctx)
		l := &link{c: c, h: h}
		switch h.transport {
		case WebSocket:
			h.conn = newWSConn(l)
		case SSE:
			h.conn = newSSEConn(l)
		default:
			h.conn = newPollConn(l)
		}
		live++
		go func() {
			err := h.conn.run(h.ctx)
			c.notes <- note{h: h, err: err}
		}()
		return h
	}
	scheduleProbe := func() {
		probeT.Stop()
		if main != nil && main.ti > 0 {
			probeT.Reset(c.opts.UpgradeInterval)
		}
	}
	scheduleToken := func(token string) {
		tokenT.Stop()
		if c.opts.TokenFunc == nil {
			return
		}
		if exp, ok := tokenExpiry(token); ok {
			tokenT.Reset(max(time.Until(exp)-c.opts.TokenRefreshMargin, time.Second))
		}
	}
	// finish ends every connection and waits for their goroutines.
	finish := func() {
		for _, h := range []*handle{main, probe} {
			if h != nil {
				h.cancel()
			}
		}
		for live > 0 {
			if n := <-c.notes; !n.opened {
				live--
			} else {
				close(n.done)
			}
		}
		c.setState(context.Background(), StateClosed, "", true)
		close(c.events)
	}
	defer finish()

	for {
		select {
		case <-c.ctx.Done():
			return

		case <-retryT.C:
			if main != nil {
				continue
			}
			token, err := c.tokens.get(c.ctx)
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				_ = c.emit(c.ctx, &ErrorEvent{Err: err})
				retryT.Reset(c.retry.failedBeforeConnecting())
				continue
			}
			scheduleToken(token)
			ti := c.retry.transport
			main = start(ti, c.urls[c.retry.url])
			c.mu.Lock()
			c.current = main
			c.mu.Unlock()
			c.setState(c.ctx, StateConnecting, main.transport, false)

		case <-probeT.C:
			if main != nil && !main.openedAt.IsZero() && main.ti > 0 && probe == nil {
				probe = start(0, main.url)
			}

		case <-tokenT.C:
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.OpenTimeout)
			token, err := c.tokens.refresh(ctx)
			cancel()
			if err != nil {
				_ = c.emit(c.ctx, &ErrorEvent{Err: err})
				tokenT.Reset(time.Second)
				continue
			}
			scheduleToken(token)
			for _, h := range []*handle{main, probe} {
				if h != nil {
					h.conn.refreshToken(token)
				}
			}

		case <-c.changed:
			for _, h := range []*handle{main, probe} {
				if h != nil {
					h.conn.update()
				}
			}

		case n := <-c.notes:
			if !n.opened {
				live--
				n.h.cancel() // its context, released
			}
			switch {
			case n.opened && n.h == main:
				main.openedAt = time.Now()
				c.tokens.accepted()
				c.setState(c.ctx, StateConnected, main.transport, false)
				scheduleProbe()

			case n.opened && n.h == probe:
				// The preferred transport is back: it takes over. It subscribed with the
				// cursors of the moment; what the old connection delivered meanwhile is not
				// delivered twice (cursors only move forward).
				old := main
				main, probe = probe, nil
				old.cancel()
				// What the application subscribed the old connection to ends with it.
				if gone := c.store.connectionEnded(); len(gone) > 0 {
					_ = c.emit(c.ctx, &ServerSubscription{Subscribed: false, Topics: gone})
				}
				c.retry.upgraded(main.ti)
				main.openedAt = time.Now()
				c.mu.Lock()
				c.current = main
				c.mu.Unlock()
				c.setState(c.ctx, StateConnected, main.transport, false)
				scheduleProbe()

			case n.h == main:
				main = nil
				probeT.Stop()
				if probe != nil {
					probe.cancel()
					probe = nil
				}
				if c.ctx.Err() != nil {
					return
				}
				if gone := c.store.connectionEnded(); len(gone) > 0 {
					_ = c.emit(c.ctx, &ServerSubscription{Subscribed: false, Topics: gone})
				}
				if !c.ended(n.h, n.err, retryT) {
					c.cancel()
					return
				}

			case n.h == probe:
				failed := probe
				probe = nil
				if main != nil && failed.ti+1 < main.ti {
					probe = start(failed.ti+1, main.url)
				} else {
					scheduleProbe()
				}
			}
			if n.done != nil {
				close(n.done)
			}
		}
	}
}

// ended decides what follows the end of the connection h: a reconnect (scheduled on retryT)
// or, for a refusal that retrying cannot fix, the end (false).
func (c *Client) ended(h *handle, err error, retryT *time.Timer) bool {
	var end *endError
	if !errors.As(err, &end) {
		end = &endError{err: err}
	}
	if end.err == nil {
		end.err = errors.New("heraldpush: the connection ended")
	}
	var refusal *Error
	if end.fatal {
		if errors.As(end.err, &refusal) && (refusal.Code == "invalid_token" || refusal.Status == 401) && c.tokens.retryRefused() {
			// One fresh token, then the same refusal is final.
			_ = c.emit(c.ctx, &ErrorEvent{Err: end.err})
			c.setState(c.ctx, StateDisconnected, "", false)
			retryT.Reset(0)
			return true
		}
		_ = c.emit(c.ctx, &ErrorEvent{Err: end.err})
		return false
	}
	_ = c.emit(c.ctx, &ErrorEvent{Err: end.err})
	if end.tokenExpired {
		c.tokens.expired()
	}
	stable := !h.openedAt.IsZero() && time.Since(h.openedAt) >= c.opts.StableAfter
	d := c.retry.ended(h.ti, stable, end.shutdown, end.retry)
	c.setState(c.ctx, StateDisconnected, "", false)
	retryT.Reset(d)
	return true
}

// setState reports a new state (once); final: the loop is ending, the event is dropped when
// the channel is full.
func (c *Client) setState(ctx context.Context, s State, t Transport, final bool) {
	c.mu.Lock()
	same := c.state == s && c.transport == t
	c.state, c.transport = s, t
	if s != StateConnected && s != StateConnecting {
		c.current = nil
	}
	c.mu.Unlock()
	if same {
		return
	}
	ev := &StateChange{State: s, Transport: t}
	if final {
		select {
		case c.events <- ev:
		default:
		}
		return
	}
	_ = c.emit(ctx, ev)
}

// link is what a connection reports through: the client's store and events, for one handle.
type link struct {
	c *Client
	h *handle
}

func (l *link) opts() *Options       { return &l.c.opts }
func (l *link) snapshot() snapshot   { return l.c.store.snapshot() }
func (l *link) token() string        { return l.c.tokens.peek() }
func (l *link) base() *url.URL       { return l.h.url }
func (l *link) transport() Transport { return l.h.transport }

// opened: the connection is subscribed and delivering. It returns once the client has
// taken note (the state event is out before the connection's first message).
func (l *link) opened(ctx context.Context) {
	done := make(chan struct{})
	select {
	case l.c.notes <- note{h: l.h, opened: true, done: done}:
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// message delivers a message once, in order.
func (l *link) message(ctx context.Context, f *frame) error {
	l.c.deliverMu.Lock()
	defer l.c.deliverMu.Unlock()
	deliver, server := l.c.store.accept(f.Topic, f.ID)
	if !deliver {
		return nil
	}
	return l.c.emit(ctx, &Message{Topic: f.Topic, ID: f.ID, Event: f.Event, Data: f.Data, MsgPack: f.raw, Server: server})
}

// lost applies a loss signal; cursor, when given, is where delivery goes on.
func (l *link) lost(ctx context.Context, topic, reason, cursor string) error {
	l.c.deliverMu.Lock()
	defer l.c.deliverMu.Unlock()
	if !l.c.store.lost(topic, cursor) {
		return nil
	}
	return l.c.emit(ctx, &Lost{Topic: topic, Reason: reason})
}

// wantsDelta: whether the subscription of name (topic or pattern) asked for deltas.
func (l *link) wantsDelta(name string) bool { return l.c.store.wantsDelta(name) }

// allDelta: whether every name of a snapshot asked for deltas (SSE and long-poll ask per
// request: a topic that did not ask may be in a namespace that refuses them).
func (l *link) allDelta(sn snapshot) bool {
	if len(sn.topics) == 0 {
		return false
	}
	for _, tc := range sn.topics {
		if !l.wantsDelta(tc.Topic) {
			return false
		}
	}
	return true
}

// delta counts a delta applied (err nil), or one that could not be (reported).
func (l *link) delta(ctx context.Context, err error) error {
	if err == nil {
		l.c.stats.deltas.Add(1)
		return nil
	}
	l.c.stats.deltaFailures.Add(1)
	return l.c.emit(ctx, &ErrorEvent{Err: err})
}

// batch counts a batch frame received.
func (l *link) batch() { l.c.stats.batches.Add(1) }

// position: where a topic starts on this connection.
func (l *link) position(topic, cursor string) { l.c.store.position(topic, cursor) }

func (l *link) member(ctx context.Context, f *frame) error {
	return l.c.emit(ctx, &MemberEvent{
		Joined: f.Type == "join", Topic: f.Topic, Conn: f.Conn, Node: f.Node,
		Transport: f.Transport, User: f.User, Info: f.Info,
	})
}

func (l *link) serverSubscribed(ctx context.Context, topics []string) error {
	added := l.c.store.serverSubscribed(topics)
	if !l.c.opts.DropPersonalTopic {
		if personal := personalTopic(l.token()); personal != "" && slices.Contains(topics, personal) && l.c.store.keepPersonal(personal) {
			l.c.topicsChanged()
		}
	}
	if len(added) > 0 {
		return l.c.emit(ctx, &ServerSubscription{Subscribed: true, Topics: added})
	}
	return nil
}

func (l *link) serverUnsubscribed(ctx context.Context, topics []string) error {
	if gone := l.c.store.serverUnsubscribed(topics); len(gone) > 0 {
		return l.c.emit(ctx, &ServerSubscription{Subscribed: false, Topics: gone})
	}
	return nil
}

// problem reports an error the connection survives (a refused publish is the caller's).
func (l *link) problem(ctx context.Context, err error) error {
	return l.c.emit(ctx, &ErrorEvent{Err: err})
}
