package heraldpush

// The Server-Sent Events transport: one `GET /v1/sse?format=json` stream for every topic,
// made again (from the cursors) when the topics change or the token is refreshed. The
// event-stream parser and what each of Herald's blocks says are in wire.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

var errRestart = errors.New("heraldpush: sse: a new stream for the new topics")

type sseConn struct {
	l       *link
	restart chan struct{}

	mu    sync.Mutex
	asked []string // names the current stream asked for

	// The gateway refused the heartbeat asked (outside its bounds, 5 s to 5 min by
	// default): its default is used from then on.
	serverHeartbeat bool
}

func newSSEConn(l *link) *sseConn {
	return &sseConn{l: l, restart: make(chan struct{}, 1)}
}

func (s *sseConn) update() {
	// A new stream is a new connection on the gateway: only when the names changed.
	names := s.l.c.store.namesCopy()
	s.mu.Lock()
	asked := slices.Clone(s.asked)
	s.mu.Unlock()
	// A name the application subscribed this stream to is held already (the kept personal
	// topic).
	same := !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(asked, n) && !s.l.c.store.serverHas(n) }) &&
		!slices.ContainsFunc(asked, func(a string) bool { return !slices.Contains(names, a) })
	if !same {
		s.kick()
	}
}

func (s *sseConn) refreshToken(string) { s.kick() }

func (s *sseConn) kick() {
	select {
	case s.restart <- struct{}{}:
	default:
	}
}

func (s *sseConn) publish(context.Context, string, json.RawMessage, string) (PublishResult, error) {
	return PublishResult{}, errNotOpen
}

func (s *sseConn) run(ctx context.Context) error {
	opened := false
	for {
		err := s.stream(ctx, &opened)
		if !errors.Is(err, errRestart) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// sseHeartbeat is the heartbeat to ask of the gateway (seconds; 0: its default, 15 s) and
// the silence after which the stream is dead: the timeout, and at least a heartbeat and a
// quarter (the gateway's grid may send one up to 1 s late) and a second.
func sseHeartbeat(timeout time.Duration, serverDefault bool) (ask int, dead time.Duration) {
	every := 15 * time.Second
	if !serverDefault {
		ask = min(max(int(timeout/2/time.Second), 1), 300)
		every = time.Duration(ask) * time.Second
	}
	return ask, max(timeout, every*5/4+time.Second)
}

// stream reads one event stream to its end.
func (s *sseConn) stream(parent context.Context, opened *bool) error {
	o := s.l.opts()
	sn := s.l.snapshot()
	names := make([]string, 0, len(sn.topics))
	for _, tc := range sn.topics {
		names = append(names, tc.Topic)
	}
	s.mu.Lock()
	s.asked = names
	s.mu.Unlock()
	// What the application subscribed the previous stream to ends with it.
	if gone := s.l.c.store.connectionEnded(); len(gone) > 0 {
		if err := s.l.c.emit(parent, &ServerSubscription{Subscribed: false, Topics: gone}); err != nil {
			return err
		}
	}
	if len(names) == 0 {
		// Nothing to stream: open, and waiting for a subscription.
		if !*opened {
			*opened = true
			s.l.opened(parent)
		}
		select {
		case <-parent.Done():
			return parent.Err()
		case <-s.restart:
			return errRestart
		}
	}

	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	ask, deadAfter := sseHeartbeat(o.HeartbeatTimeout, s.serverHeartbeat)
	q := url.Values{"topic": names}
	q.Set("format", "json")
	if s.l.allDelta(sn) {
		q.Set("delta", DeltaFossil)
	}
	if ask > 0 {
		q.Set("heartbeat", strconv.Itoa(ask))
	}
	req, err := http.NewRequestWithContext(noSilentRetry(ctx, cancel), http.MethodGet, endpoint(s.l.base(), "/v1/sse", q), nil)
	if err != nil {
		return fmt.Errorf("heraldpush: sse: %w", err)
	}
	req.Header.Set("accept", "text/event-stream")
	if resume := FormatResumeList(append(slices.Clone(sn.topics), sn.patternCursors...)); resume != "" {
		req.Header.Set("last-event-id", resume)
	}
	if t := s.l.token(); t != "" {
		req.Header.Set("authorization", "Bearer "+t)
	}

	sawOpening := false
	var mu sync.Mutex // sawOpening, for the timer
	openTimer := time.AfterFunc(o.OpenTimeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if !sawOpening {
			cancel(errOpenTimeout)
		}
	})
	defer openTimer.Stop()
	dead := time.AfterFunc(deadAfter, func() { cancel(errDead) })
	defer dead.Stop()
	// A new token or new topics: this stream ends, the next starts at once.
	stopWatch := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-s.restart:
			cancel(errRestart)
		case <-stopWatch:
		case <-ctx.Done():
		}
	}()
	defer wg.Wait()
	defer close(stopWatch)

	cause := func(err error) error {
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			if errors.Is(c, context.Canceled) && parent.Err() != nil {
				return parent.Err()
			}
			return c
		}
		return err
	}

	res, err := o.HTTPClient.Do(req)
	if err != nil {
		return cause(fmt.Errorf("heraldpush: sse: %w", err))
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		end := refusal(res, "sse")
		var refused *Error
		if ask > 0 && errors.As(end, &refused) && refused.Code == "bad_heartbeat" {
			s.serverHeartbeat = true
			return errRestart
		}
		return end
	}

	var (
		retryHint time.Duration
		ending    *endError
	)
	// The delta bases of this stream (a new stream starts every topic with full data).
	bs := newBases(s.l.wantsDelta)
	parser := &sseParser{max: o.MaxFrameBytes, retry: func(ms int64) {
		if sawOpening {
			retryHint = time.Duration(ms) * time.Millisecond
		}
	}}
	handle := func(b sseBlock) error {
		if b.Event == "" { // an id and no data: the opening block, or a position
			list := ParseResumeList(*b.ID)
			var topics []string
			for _, tc := range list {
				topics = append(topics, tc.Topic)
			}
			if err := s.serverNew(ctx, names, topics); err != nil {
				return err
			}
			for _, tc := range list {
				s.l.position(tc.Topic, tc.Cursor)
			}
			mu.Lock()
			first := !sawOpening
			sawOpening = true
			mu.Unlock()
			if first && !*opened {
				*opened = true
				s.l.opened(ctx)
			}
			return nil
		}
		return s.block(ctx, names, b, &ending, bs)
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			// Delivering may wait for the application: not the gateway's silence.
			dead.Stop()
			err := parser.push(buf[:n], handle)
			dead.Reset(deadAfter)
			if err != nil {
				if errors.Is(err, errMalformed) {
					return &endError{err: err}
				}
				return cause(err)
			}
		}
		if rerr != nil {
			if ending != nil {
				if ending.retry == 0 {
					ending.retry = retryHint
				}
				return ending
			}
			if rerr == io.EOF {
				return &endError{err: errors.New("heraldpush: sse: the stream ended"), retry: retryHint}
			}
			return cause(fmt.Errorf("heraldpush: sse: %w", rerr))
		}
	}
}

// serverNew reports topics named by the server that the stream did not ask for (a connect
// hook's, the admin API's), those its patterns deliver excepted.
func (s *sseConn) serverNew(ctx context.Context, names, topics []string) error {
	var added []string
	for _, t := range topics {
		if slices.Contains(names, t) || slices.ContainsFunc(names, func(p string) bool { return MatchesPattern(p, t) }) {
			continue
		}
		added = append(added, t)
	}
	if len(added) == 0 {
		return nil
	}
	return s.l.serverSubscribed(ctx, added)
}

// block acts on one block with data.
func (s *sseConn) block(ctx context.Context, names []string, b sseBlock, ending **endError, bs *bases) error {
	ev, err := decodeSSEBlock(b)
	if err != nil {
		return err
	}
	switch ev.kind {
	case sseMessage:
		wasDelta := ev.frame.Delta
		if err := bs.apply(&ev.frame, false); err != nil {
			// Nothing of it is delivered: a new stream resumes every topic from its cursor
			// (the last message delivered), so the message comes again in full.
			if err := s.l.delta(ctx, err); err != nil {
				return err
			}
			return errRestart
		}
		if wasDelta {
			if err := s.l.delta(ctx, nil); err != nil {
				return err
			}
		}
		return s.l.message(ctx, &ev.frame)
	case sseLostSignal:
		bs.drop(ev.lost.Topic)
		if err := s.l.lost(ctx, ev.lost.Topic, ev.lost.Reason, ev.lostAt); err != nil {
			return err
		}
	case sseMember:
		return s.l.member(ctx, &ev.frame)
	case sseSubscribed:
		if err := s.serverNew(ctx, names, ev.topics); err != nil {
			return err
		}
	case sseUnsubscribed:
		if err := s.l.serverUnsubscribed(ctx, ev.topics); err != nil {
			return err
		}
		// A topic the client wants that the application dropped: asked for again.
		if slices.ContainsFunc(ev.topics, func(x string) bool { return slices.Contains(names, x) }) {
			s.kick()
		}
	case sseShutdownSignal:
		*ending = &endError{err: errors.New("heraldpush: sse: the node is draining"), shutdown: true, retry: ev.retry}
	case sseDisconnectSignal:
		e := &endError{err: &Error{Code: "disconnected", Reason: ev.reason}}
		e.tokenExpired = ev.reason == "token expired"
		// Ended by the application with "stay away" (logged out, banned): no reconnect.
		e.fatal = !ev.reconnect
		*ending = e
	}
	for _, tc := range ev.positions {
		s.l.position(tc.Topic, tc.Cursor)
	}
	return nil
}
