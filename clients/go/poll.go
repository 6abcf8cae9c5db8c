package heraldpush

// The long-poll transport: `GET /v1/poll` again and again, each from the cursors the last
// answer gave (held in the store, like every transport's).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

type pollConn struct {
	l       *link
	restart chan struct{}
}

func newPollConn(l *link) *pollConn {
	return &pollConn{l: l, restart: make(chan struct{}, 1)}
}

// update: the next poll reads the topics anyway; the one held now is cut short.
func (p *pollConn) update() {
	select {
	case p.restart <- struct{}{}:
	default:
	}
}

func (p *pollConn) refreshToken(string) {} // read by the next poll

func (p *pollConn) publish(context.Context, string, json.RawMessage, string) (PublishResult, error) {
	return PublishResult{}, errNotOpen
}

func (p *pollConn) run(ctx context.Context) error {
	first := true
	for ctx.Err() == nil {
		sn := p.l.snapshot()
		if len(sn.topics) == 0 && len(p.l.c.store.serverTopics()) == 0 {
			// Nothing to poll: open, and waiting for a subscription.
			if first {
				first = false
				p.l.opened(ctx)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.restart:
				continue
			}
		}
		err := p.poll(ctx, sn, first)
		if errors.Is(err, errRestart) {
			continue
		}
		if err != nil {
			return err
		}
		if first {
			first = false
			p.l.opened(ctx)
		}
	}
	return ctx.Err()
}

// pollTimes are how long a poll is held (whole seconds) and how long past that hold an
// answer may take before the connection counts as dead: a poll is held at most half the
// heartbeat timeout (and at least a second, not to poll in a loop), so that a silent
// connection is noticed within it.
func pollTimes(pollTimeout, heartbeat time.Duration) (hold, grace time.Duration) {
	hold = max(min(pollTimeout, heartbeat/2).Truncate(time.Second), time.Second)
	return hold, max(heartbeat-hold, time.Second)
}

// poll makes one request and delivers its answer.
func (p *pollConn) poll(parent context.Context, sn snapshot, first bool) error {
	o := p.l.opts()
	q := url.Values{}
	names := make([]string, 0, len(sn.topics))
	for _, tc := range sn.topics {
		q.Add("topic", tc.Topic)
		names = append(names, tc.Topic)
	}
	q.Set("format", "json")
	if p.l.allDelta(sn) {
		q.Set("delta", DeltaFossil)
	}
	hold, deadAfter := pollTimes(o.PollTimeout, o.HeartbeatTimeout)
	if first {
		hold = 0
	}
	q.Set("timeout", strconv.Itoa(int(hold/time.Second)))
	// The topics' cursors, then those of the topics the patterns delivered and of the
	// application's topics.
	list := slices.Clone(sn.topics)
	for _, tc := range append(sn.patternCursors, p.l.c.store.serverTopics()...) {
		if !slices.ContainsFunc(list, func(x TopicCursor) bool { return x.Topic == tc.Topic }) {
			list = append(list, tc)
		}
	}
	if resume := FormatResumeList(list); resume != "" {
		q.Set("cursor", resume)
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	// The first poll (answered at once) must come within the open timeout; later ones within
	// the hold and the rest of the heartbeat timeout, else the connection is dead.
	limit, why := hold+deadAfter, errDead
	if first {
		limit, why = o.OpenTimeout, errOpenTimeout
	}
	timer := time.AfterFunc(limit, func() { cancel(why) })
	defer timer.Stop()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-p.restart:
			cancel(errRestart)
		case <-stop:
		case <-ctx.Done():
		}
	}()
	defer func() { close(stop); <-done }()

	req, err := http.NewRequestWithContext(noSilentRetry(ctx, cancel), http.MethodGet, endpoint(p.l.base(), "/v1/poll", q), nil)
	if err != nil {
		return fmt.Errorf("heraldpush: poll: %w", err)
	}
	req.Header.Set("accept", "application/json")
	if t := p.l.token(); t != "" {
		req.Header.Set("authorization", "Bearer "+t)
	}
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
		return cause(fmt.Errorf("heraldpush: poll: %w", err))
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return refusal(res, "poll")
	}
	body, err := readLimited(res.Body, o.MaxFrameBytes)
	if err != nil {
		return cause(fmt.Errorf("heraldpush: poll: %w", err))
	}
	timer.Stop()
	if err := p.deliver(parent, names, body); err != nil {
		if errors.Is(err, errMalformed) {
			return &endError{err: err}
		}
		return err
	}
	return nil
}

func (p *pollConn) deliver(ctx context.Context, names []string, body []byte) error {
	a, err := decodePollAnswer(body)
	if err != nil {
		return err
	}
	// Topics of the answer the poll did not ask for, nor its patterns deliver: a connect
	// hook's.
	var added []string
	for _, tc := range a.positions {
		if !slices.Contains(names, tc.Topic) && !slices.ContainsFunc(names, func(n string) bool { return MatchesPattern(n, tc.Topic) }) {
			added = append(added, tc.Topic)
		}
	}
	if len(added) > 0 {
		if err := p.l.serverSubscribed(ctx, added); err != nil {
			return err
		}
	}
	for _, l := range a.lost {
		if err := p.l.lost(ctx, l.topic, l.reason, l.at); err != nil {
			return err
		}
	}
	// Deltas apply within an answer (every poll is a resume: the first message of each topic
	// is full). A topic whose delta does not apply gets nothing more from this answer, and its
	// cursor stays at the last message delivered: the next poll resumes it from there.
	bs := newBases(p.l.wantsDelta)
	failed := map[string]bool{}
	for i := range a.messages {
		m := &a.messages[i]
		if failed[m.Topic] {
			continue
		}
		wasDelta := m.Delta
		if err := bs.apply(m, false); err != nil {
			failed[m.Topic] = true
			if err := p.l.delta(ctx, err); err != nil {
				return err
			}
			continue
		}
		if wasDelta {
			if err := p.l.delta(ctx, nil); err != nil {
				return err
			}
		}
		if err := p.l.message(ctx, m); err != nil {
			return err
		}
	}
	for i := range a.members {
		if err := p.l.member(ctx, &a.members[i]); err != nil {
			return err
		}
	}
	// The cursor is where the next poll goes on from (after the loss, after the batch).
	for _, tc := range a.positions {
		if !failed[tc.Topic] {
			p.l.position(tc.Topic, tc.Cursor)
		}
	}
	if a.disconnect != nil {
		// The application ended this client's connection (admin API); reconnect: false
		// (logged out, banned) stops polling.
		return &endError{err: &Error{Code: "disconnected", Reason: a.disconnect.reason}, fatal: !a.disconnect.reconnect}
	}
	return nil
}
