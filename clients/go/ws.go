package heraldpush

// The WebSocket transport: frames on `/v1/ws` (JSON text, or MessagePack binary with the
// `herald.msgpack` subprotocol), subscriptions changed in place, publishing with a reply.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// MaxPending is the most WebSocket commands awaiting a reply at once; past it Publish is
// refused at once.
const MaxPending = 1024

// Error codes of a refused subscription that retrying cannot fix.
var fatalSubscribe = map[string]bool{
	"forbidden": true, "bad_topic": true, "too_many_topics": true, "bad_cursor": true, "invalid_token": true,
	"bad_delta": true, "delta_not_allowed": true,
}

var (
	errDead        = errors.New("heraldpush: no sign of life from the gateway (heartbeat missed)")
	errOpenTimeout = errors.New("heraldpush: the connection did not open in time")
)

type wsPending struct {
	kind  string // subscribe, unsubscribe, publish, auth, resync (an unsubscribe)
	reply chan wsReply
	topic string // resync: the topic subscribed again after a delta that did not apply
}

type wsReply struct {
	res PublishResult
	err error
}

type wsConn struct {
	l *link

	mu        sync.Mutex // the socket's writes, in the order of pending
	ws        *websocket.Conn
	ctx       context.Context // the connection's, once open
	pending   []wsPending
	requested map[string]bool // names subscribed or asked for
	byServer  map[string]bool // topics the application subscribed this connection to
	// resyncing: topics whose delta did not apply, unsubscribed and subscribed again from
	// their cursors: what comes for them before the `unsubscribed` reply is dropped.
	resyncing map[string]bool
	bases     *bases // the base of each topic that asked for deltas
	opened    bool
	failed    error                   // the first reason the connection ended
	stop      context.CancelCauseFunc // ends the connection

	last atomic.Int64 // unix nanos of the last sign of life
	busy atomic.Bool  // delivering to the application (not the gateway's silence)
}

func newWSConn(l *link) *wsConn {
	return &wsConn{l: l, requested: map[string]bool{}, byServer: map[string]bool{}, resyncing: map[string]bool{},
		bases: newBases(l.wantsDelta)}
}

func (w *wsConn) alive() { w.last.Store(time.Now().UnixNano()) }

func (w *wsConn) run(parent context.Context) error {
	o := w.l.opts()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)

	u := *w.l.base()
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/ws"
	u.RawPath, u.RawQuery = "", ""
	if !o.NoBatch {
		u.RawQuery = "batch=1"
	}
	header := http.Header{}
	if t := w.l.token(); t != "" {
		header.Set("authorization", "Bearer "+t)
	}
	dopts := &websocket.DialOptions{
		HTTPClient:     o.HTTPClient,
		HTTPHeader:     header,
		OnPingReceived: func(context.Context, []byte) bool { w.alive(); return true },
		OnPongReceived: func(context.Context, []byte) { w.alive() },
	}
	if o.MsgPack {
		dopts.Subprotocols = []string{"herald.msgpack"}
	}
	if o.Compression {
		dopts.CompressionMode = websocket.CompressionNoContextTakeover
	}
	dialCtx, dialCancel := context.WithTimeout(ctx, o.OpenTimeout)
	ws, res, err := websocket.Dial(dialCtx, u.String(), dopts)
	timedOut := dialCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil
	dialCancel()
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols && res.Body != nil {
			return refusal(res, "websocket")
		}
		if timedOut {
			return fmt.Errorf("%w: websocket: %v", errOpenTimeout, err)
		}
		return fmt.Errorf("heraldpush: websocket: %w", err)
	}
	if o.MsgPack && ws.Subprotocol() != "herald.msgpack" {
		ws.CloseNow()
		return &endError{err: errors.New("heraldpush: websocket: the gateway did not take the herald.msgpack subprotocol")}
	}
	ws.SetReadLimit(int64(o.MaxFrameBytes))
	w.alive()

	var wg sync.WaitGroup
	defer func() {
		cancel(nil)
		wg.Wait()
		w.fail(errors.New("heraldpush: the connection ended"))
		if errors.Is(context.Cause(ctx), errDead) {
			ws.CloseNow()
			return
		}
		// A polite close, given a second.
		done := make(chan struct{})
		go func() { ws.Close(websocket.StatusNormalClosure, ""); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			ws.CloseNow()
			<-done
		}
	}()

	openTimer := time.AfterFunc(o.OpenTimeout, func() {
		w.mu.Lock()
		opened := w.opened
		w.mu.Unlock()
		if !opened {
			cancel(errOpenTimeout)
		}
	})
	defer openTimer.Stop()

	// The watchdog: a ping when the gateway has been quiet for half the heartbeat timeout,
	// the connection ends when it stayed quiet for all of it.
	hb := o.HeartbeatTimeout
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(hb/8, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if w.busy.Load() {
				w.alive()
				continue
			}
			idle := time.Since(time.Unix(0, w.last.Load()))
			if idle >= hb {
				cancel(errDead)
				return
			}
			if idle >= hb/2 {
				pctx, pcancel := context.WithTimeout(ctx, hb/4)
				_ = ws.Ping(pctx)
				pcancel()
			}
		}
	}()

	w.mu.Lock()
	w.ws, w.ctx, w.stop = ws, ctx, cancel
	w.mu.Unlock()
	if len(w.l.snapshot().topics) == 0 {
		w.markOpen(ctx)
	} else if err := w.subscribe(); err != nil {
		return err
	}

	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			return w.readError(ctx, err)
		}
		w.alive()
		if err := w.receive(ctx, typ, b); err != nil {
			if errors.Is(err, errMalformed) {
				return &endError{err: err}
			}
			if ctx.Err() != nil {
				return w.readError(ctx, ctx.Err())
			}
			return err
		}
	}
}

// receive decodes one WebSocket frame and acts on it: a batch frame's elements one by one, in
// order, each as if it had come alone (docs/protocol.md "Batch frames"); the elements before
// a malformed one have been acted on.
func (w *wsConn) receive(ctx context.Context, typ websocket.MessageType, b []byte) error {
	// The time spent acting on the frame (waiting for the application included) is not the
	// gateway's silence.
	w.busy.Store(true)
	defer func() {
		w.busy.Store(false)
		w.alive()
	}()
	var f frame
	if w.l.opts().MsgPack {
		if typ != websocket.MessageBinary {
			return malformed("a text frame on a herald.msgpack connection")
		}
		frames := newMsgpackFrames(b)
		if frames.batch {
			w.l.batch()
		}
		for {
			ok, err := frames.next(&f)
			if !ok || err != nil {
				return err
			}
			if err := w.handle(ctx, &f); err != nil {
				return err
			}
		}
	}
	if typ != websocket.MessageText {
		return malformed("a binary frame on a JSON connection")
	}
	frames := newJSONFrames(b)
	if frames.batch {
		w.l.batch()
	}
	for {
		elem, ok, err := frames.next()
		if !ok || err != nil {
			return err
		}
		if f, err = decodeJSONFrame(elem); err != nil {
			if frames.batch {
				err = fmt.Errorf("%w (element %d of a batch frame)", err, frames.k-1)
			}
			return err
		}
		if err := w.handle(ctx, &f); err != nil {
			return err
		}
	}
}

// readError says why the socket ended.
func (w *wsConn) readError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		w.mu.Lock()
		failed := w.failed
		w.mu.Unlock()
		if failed != nil {
			return failed
		}
		return cause
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		end := &endError{err: &CloseError{Code: int(ce.Code), Reason: ce.Reason}}
		switch {
		case ce.Code == websocket.StatusServiceRestart:
			end.shutdown = true
		case ce.Code == websocket.StatusPolicyViolation && ce.Reason == "token expired":
			end.tokenExpired = true
		case ce.Code == 4001:
			end.fatal = true
		}
		return end
	}
	return fmt.Errorf("heraldpush: websocket: %w", err)
}

// send writes a command and records the reply it awaits (the gateway answers every command,
// in order). Called with w.mu held.
func (w *wsConn) sendLocked(cmd command, p wsPending) error {
	var (
		b   []byte
		err error
		typ = websocket.MessageText
	)
	if w.l.opts().MsgPack {
		b, err = cmd.encodeMsgpack()
		typ = websocket.MessageBinary
	} else {
		b, err = cmd.encodeJSON()
	}
	if err != nil {
		return err
	}
	w.pending = append(w.pending, p)
	wctx, cancel := context.WithTimeout(w.ctx, w.l.opts().OpenTimeout)
	defer cancel()
	if err := w.ws.Write(wctx, typ, b); err != nil {
		w.pending = w.pending[:len(w.pending)-1]
		return fmt.Errorf("heraldpush: websocket write: %w", err)
	}
	return nil
}

// subscribe sends what the subscriptions need now: a `subscribe` for the names not held yet
// (with their cursors, and those of the topics their patterns delivered), an `unsubscribe`
// for those dropped.
func (w *wsConn) subscribe() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ws == nil || w.failed != nil {
		return nil
	}
	// Read under w.mu: two updates at once must not compare stale topics with fresh ones.
	sn := w.l.snapshot()
	wanted := map[string]bool{}
	var topics []string
	cursors := map[string]string{}
	var held []string
	for _, tc := range sn.topics {
		wanted[tc.Topic] = true
		if w.requested[tc.Topic] || w.byServer[tc.Topic] {
			if w.requested[tc.Topic] {
				held = append(held, tc.Topic)
			}
			continue
		}
		topics = append(topics, tc.Topic)
		if tc.Cursor != "" {
			cursors[tc.Topic] = tc.Cursor
		}
	}
	for _, tc := range sn.patternCursors {
		heldBy := slices.ContainsFunc(held, func(p string) bool { return MatchesPattern(p, tc.Topic) })
		newBy := slices.ContainsFunc(topics, func(p string) bool { return MatchesPattern(p, tc.Topic) })
		if newBy && !heldBy {
			cursors[tc.Topic] = tc.Cursor
		}
	}
	var drop []string
	for t := range w.requested {
		if !wanted[t] {
			drop = append(drop, t)
		}
	}
	slices.Sort(drop)
	// One frame for the names that ask for deltas, one for the others; a cursor goes with the
	// frame of its topic, or of a pattern that matches it.
	for _, delta := range []bool{false, true} {
		var group []string
		for _, t := range topics {
			if w.l.wantsDelta(t) == delta {
				group = append(group, t)
			}
		}
		if len(group) == 0 {
			continue
		}
		var gc map[string]string
		for t, c := range cursors {
			if slices.Contains(group, t) || slices.ContainsFunc(group, func(p string) bool { return MatchesPattern(p, t) }) {
				if gc == nil {
					gc = map[string]string{}
				}
				gc[t] = c
			}
		}
		for _, t := range group {
			w.requested[t] = true
			w.bases.drop(t)
		}
		cmd := subscribeCommand(group, gc)
		if delta {
			cmd = deltaSubscribeCommand(group, gc)
		}
		if err := w.sendLocked(cmd, wsPending{kind: "subscribe"}); err != nil {
			return err
		}
	}
	if len(drop) > 0 {
		for _, t := range drop {
			delete(w.requested, t)
			w.bases.drop(t)
		}
		if err := w.sendLocked(unsubscribeCommand(drop), wsPending{kind: "unsubscribe"}); err != nil {
			return err
		}
	}
	return nil
}

func (w *wsConn) update() {
	if err := w.subscribe(); err != nil {
		w.fail(err)
	}
}

func (w *wsConn) refreshToken(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ws == nil || w.failed != nil {
		return
	}
	if err := w.sendLocked(authCommand(token), wsPending{kind: "auth"}); err != nil {
		w.failLocked(err)
	}
}

func (w *wsConn) publish(ctx context.Context, topic string, data json.RawMessage, event string) (PublishResult, error) {
	reply := make(chan wsReply, 1)
	w.mu.Lock()
	if w.ws == nil || w.failed != nil || !w.opened {
		w.mu.Unlock()
		return PublishResult{}, errNotOpen
	}
	if len(w.pending) >= MaxPending {
		w.mu.Unlock()
		return PublishResult{}, &Error{Code: "too_many_pending", Reason: fmt.Sprintf("more than %d commands await a reply", MaxPending)}
	}
	err := w.sendLocked(publishCommand(topic, data, event), wsPending{kind: "publish", reply: reply})
	connCtx := w.ctx
	w.mu.Unlock()
	if err != nil {
		return PublishResult{}, err
	}
	select {
	case r := <-reply:
		return r.res, r.err
	case <-ctx.Done():
		return PublishResult{}, fmt.Errorf("heraldpush: publish: %w", ctx.Err())
	case <-connCtx.Done():
		// The reader may have answered just before it ended.
		select {
		case r := <-reply:
			return r.res, r.err
		default:
		}
		return PublishResult{}, errors.New("heraldpush: publish: the connection ended before the gateway answered")
	}
}

// fail ends the connection with err (the first reason wins); pending publishes fail.
func (w *wsConn) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failLocked(err)
}

func (w *wsConn) failLocked(err error) {
	if w.failed == nil {
		w.failed = err
		if w.stop != nil {
			w.stop(err)
		}
	}
	for _, p := range w.pending {
		if p.reply != nil {
			p.reply <- wsReply{err: fmt.Errorf("heraldpush: publish: %w", err)}
		}
	}
	w.pending = nil
}

func (w *wsConn) markOpen(ctx context.Context) {
	w.mu.Lock()
	was := w.opened
	w.opened = true
	w.mu.Unlock()
	if !was {
		w.l.opened(ctx)
	}
}

// resubscribe: a delta of topic did not apply. Nothing of it is delivered; the topic is
// unsubscribed and subscribed again from its cursor (the last message delivered), so the
// message comes again in full (docs/protocol.md "When a delta does not apply").
func (w *wsConn) resubscribe(ctx context.Context, topic string, derr error) error {
	if err := w.l.delta(ctx, derr); err != nil {
		return err
	}
	w.bases.drop(topic)
	cursor := ""
	for _, tc := range w.l.snapshot().topics {
		if tc.Topic == topic {
			cursor = tc.Cursor
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.requested[topic] || cursor == "" || w.ws == nil || w.failed != nil {
		// Not a topic this connection asked for by name, or no cursor to resume it from:
		// the connection is made again, from the cursors.
		return &endError{err: derr}
	}
	w.resyncing[topic] = true
	if err := w.sendLocked(unsubscribeCommand([]string{topic}), wsPending{kind: "resync", topic: topic}); err != nil {
		return err
	}
	return w.sendLocked(deltaSubscribeCommand([]string{topic}, map[string]string{topic: cursor}), wsPending{kind: "subscribe"})
}

// shift takes the oldest command awaiting a reply.
func (w *wsConn) shift() (wsPending, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return wsPending{}, false
	}
	p := w.pending[0]
	w.pending = w.pending[1:]
	return p, true
}

// handle acts on one frame; an error ends the connection.
func (w *wsConn) handle(ctx context.Context, f *frame) error {
	switch f.Type {
	case "message":
		w.mu.Lock()
		skip := w.resyncing[f.Topic]
		w.mu.Unlock()
		if skip {
			return nil
		}
		wasDelta := f.Delta
		if err := w.bases.apply(f, w.l.opts().MsgPack); err != nil {
			return w.resubscribe(ctx, f.Topic, err)
		}
		if wasDelta {
			if err := w.l.delta(ctx, nil); err != nil {
				return err
			}
		}
		return w.l.message(ctx, f)
	case "lost":
		w.bases.drop(f.Topic)
		return w.l.lost(ctx, f.Topic, f.Reason, "")
	case "join", "leave":
		return w.l.member(ctx, f)
	case "subscribed":
		if f.By == "server" {
			// Not a reply: the application subscribed this connection (admin API, a send,
			// a connect hook).
			var topics []string
			w.mu.Lock()
			for _, t := range f.Topics {
				if !w.requested[t] {
					w.byServer[t] = true
					topics = append(topics, t)
				}
			}
			w.mu.Unlock()
			if err := w.l.serverSubscribed(ctx, topics); err != nil {
				return err
			}
			for t, c := range f.Cursor {
				w.l.position(t, c)
			}
			return nil
		}
		w.shift()
		for t, c := range f.Cursor {
			w.l.position(t, c)
		}
		w.markOpen(ctx)
	case "unsubscribed":
		if f.By == "server" {
			w.mu.Lock()
			for _, t := range f.Topics {
				delete(w.byServer, t)
				delete(w.requested, t)
			}
			w.mu.Unlock()
			if err := w.l.serverUnsubscribed(ctx, f.Topics); err != nil {
				return err
			}
			// The client's own subscriptions to a topic the application dropped are asked
			// for again.
			return w.subscribe()
		}
		if p, ok := w.shift(); ok && p.kind == "resync" {
			w.mu.Lock()
			delete(w.resyncing, p.topic)
			w.mu.Unlock()
		}
	case "published":
		if p, ok := w.shift(); ok && p.reply != nil {
			p.reply <- wsReply{res: PublishResult{Topic: f.Topic, ID: f.ID}}
		}
	case "authenticated":
		w.shift()
	case "error":
		refused := &Error{Code: f.Code, Reason: f.Reason}
		if len(f.Topics) > 0 && f.Code == "forbidden" {
			// A fresh token no longer allows these topics: dropped by the gateway.
			w.mu.Lock()
			for _, t := range f.Topics {
				delete(w.requested, t)
			}
			w.mu.Unlock()
			return w.l.problem(ctx, refused)
		}
		p, _ := w.shift()
		switch p.kind {
		case "publish":
			p.reply <- wsReply{err: refused}
		case "subscribe", "auth":
			return &endError{err: refused, fatal: fatalSubscribe[refused.Code] || p.kind == "auth"}
		default:
			return w.l.problem(ctx, refused)
		}
	}
	return nil
}
