package heraldpush

import (
	"slices"
	"sync"
)

// store holds the subscriptions (topics and patterns) and the cursors the client resumes
// from: one per topic subscribed by name or held by the application, and one for each topic a
// pattern delivered (the most recent MaxPatternTopics). Every message and loss signal of every
// connection goes through it, so each is delivered once and cursors only move forward.
type store struct {
	mu      sync.Mutex
	names   []string          // topics and patterns, in the order subscribed
	cursors map[string]string // topic → cursor
	recent  []string          // topics a pattern delivered (not named), least recent first
	hints   map[string]string // positions in another epoch, until the loss signal comes
	server  map[string]bool   // topics the application subscribed the connection to
	delta   map[string]bool   // names subscribed asking for Fossil deltas
	// personal: the personal topic `user:<sub>`, kept among names once the application
	// subscribed a connection to it, so that every later connection subscribes it again
	// (from its cursor): messages sent to the user while the client was away are not missed.
	personal string
}

func newStore(names []string, cursors map[string]string) *store {
	s := &store{cursors: map[string]string{}, hints: map[string]string{}, server: map[string]bool{}, delta: map[string]bool{}}
	s.add(names...)
	for t, c := range cursors {
		if _, ok := ParseCursor(c); ok && ValidTopic(t) {
			s.cursors[t] = c
			if !slices.Contains(s.names, t) && s.patternOf(t) != "" {
				s.recent = append(s.recent, t)
			}
		}
	}
	s.trimRecent()
	return s
}

// add subscribes names; it reports whether any was new.
func (s *store) add(names ...string) bool {
	changed := false
	for _, n := range names {
		if !slices.Contains(s.names, n) {
			s.names = append(s.names, n)
			s.recent = slices.DeleteFunc(s.recent, func(t string) bool { return t == n })
			changed = true
		}
	}
	return changed
}

// remove unsubscribes names; it reports whether any was subscribed.
func (s *store) remove(names ...string) bool {
	changed := false
	for _, n := range names {
		i := slices.Index(s.names, n)
		if i < 0 {
			continue
		}
		changed = true
		s.names = slices.Delete(s.names, i, i+1)
		delete(s.delta, n)
		if IsPattern(n) {
			s.recent = slices.DeleteFunc(s.recent, func(t string) bool {
				if s.patternOf(t) != "" {
					return false
				}
				if !s.server[t] {
					delete(s.cursors, t)
				}
				return true
			})
		} else if s.patternOf(n) != "" {
			s.touch(n)
		} else if !s.server[n] {
			delete(s.cursors, n)
		}
	}
	return changed
}

// wantsDelta: whether name (a topic or pattern) was subscribed asking for deltas.
func (s *store) wantsDelta(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delta[name]
}

func (s *store) patternOf(topic string) string {
	for _, n := range s.names {
		if MatchesPattern(n, topic) {
			return n
		}
	}
	return ""
}

func (s *store) named(topic string) bool { return slices.Contains(s.names, topic) || s.server[topic] }

// own reports whether the client subscribed topic itself, by name or with a pattern.
func (s *store) own(topic string) bool {
	return slices.Contains(s.names, topic) || s.patternOf(topic) != ""
}

// touch makes a topic a pattern delivered the most recent; past MaxPatternTopics the least
// recent is forgotten (its cursor too, unless it has one of its own).
func (s *store) touch(topic string) {
	s.recent = slices.DeleteFunc(s.recent, func(t string) bool { return t == topic })
	if s.patternOf(topic) == "" {
		return
	}
	s.recent = append(s.recent, topic)
	s.trimRecent()
}

func (s *store) trimRecent() {
	for len(s.recent) > MaxPatternTopics {
		oldest := s.recent[0]
		s.recent = s.recent[1:]
		if !s.named(oldest) {
			delete(s.cursors, oldest)
		}
	}
}

// snapshot is what a connection subscribes with, read at the moment of (re)subscribing.
type snapshot struct {
	// topics: the names subscribed (topics and patterns), each topic with its cursor ("" for
	// none, and for patterns).
	topics []TopicCursor
	// patternCursors: the cursors of topics the patterns delivered (not named), least recent
	// first.
	patternCursors []TopicCursor
}

func (s *store) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sn snapshot
	for _, n := range s.names {
		sn.topics = append(sn.topics, TopicCursor{Topic: n, Cursor: s.cursors[n]})
	}
	for _, t := range s.recent {
		if c := s.cursors[t]; c != "" && !slices.Contains(s.names, t) && s.patternOf(t) != "" {
			sn.patternCursors = append(sn.patternCursors, TopicCursor{Topic: t, Cursor: c})
		}
	}
	return sn
}

// serverTopics are the topics the application subscribed the connection to, with cursors.
func (s *store) serverTopics() []TopicCursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TopicCursor
	for t := range s.server {
		out = append(out, TopicCursor{Topic: t, Cursor: s.cursors[t]})
	}
	slices.SortFunc(out, func(a, b TopicCursor) int {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	})
	return out
}

// accept moves the topic's cursor to a message's id and reports whether it is new and for
// whom: deliver is false for a duplicate or a topic nobody subscribed; server is true when
// only the application's subscription wants it.
func (s *store) accept(topic, id string) (deliver, server bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	own := s.own(topic)
	if !own && !s.server[topic] {
		return false, false
	}
	if !IsAfter(id, s.cursors[topic]) {
		return false, false
	}
	s.cursors[topic] = id
	delete(s.hints, topic)
	if !s.named(topic) {
		s.touch(topic)
	}
	return true, !own || topic == s.personal
}

// keepPersonal keeps the personal topic across connections; true when it was not yet.
func (s *store) keepPersonal(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.personal == topic {
		return false
	}
	s.personal = topic
	s.add(topic)
	return true
}

// serverHas reports whether the application subscribed the connection to topic.
func (s *store) serverHas(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.server[topic]
}

// position records where a connection says a topic starts (subscribed cursors, an SSE id,
// a poll cursor).
func (s *store) position(topic, cursor string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if IsPattern(topic) || (!s.own(topic) && !s.server[topic]) {
		return
	}
	if _, ok := ParseCursor(cursor); !ok {
		return
	}
	cur, has := s.cursors[topic]
	switch {
	case !has:
		s.cursors[topic] = cursor
	case !sameEpoch(cur, cursor):
		// Another life of the stream: the loss signal follows, and delivery goes on here.
		s.hints[topic] = cursor
	case IsAfter(cursor, cur):
		s.cursors[topic] = cursor
	}
	if !s.named(topic) && !slices.Contains(s.recent, topic) {
		s.touch(topic)
	}
}

// lost applies a loss signal: the topic goes on from cursor (or the connection's hint, or
// from nothing). It reports whether the client should be told (a topic or pattern it holds).
func (s *store) lost(topic, cursor string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if IsPattern(topic) {
		return slices.Contains(s.names, topic)
	}
	if !s.own(topic) && !s.server[topic] {
		return false
	}
	next := cursor
	if next == "" {
		next = s.hints[topic]
	}
	if next != "" {
		s.cursors[topic] = next
	} else {
		delete(s.cursors, topic)
	}
	delete(s.hints, topic)
	if !s.named(topic) {
		s.touch(topic)
	}
	return true
}

// connectionEnded forgets what belonged to the connection: position hints, and the topics
// the application subscribed it to (their cursors go unless the client holds the topic).
func (s *store) connectionEnded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.hints)
	var gone []string
	for t := range s.server {
		gone = append(gone, t)
		delete(s.server, t)
		if !s.own(t) {
			delete(s.cursors, t)
		}
	}
	slices.Sort(gone)
	return gone
}

// serverSubscribed records topics the application subscribed the connection to; it returns
// those the client did not hold already.
func (s *store) serverSubscribed(topics []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []string
	for _, t := range topics {
		if !ValidTopic(t) || s.server[t] {
			continue
		}
		s.server[t] = true
		if !s.own(t) {
			added = append(added, t)
		}
	}
	return added
}

// serverUnsubscribed: the application dropped topics.
func (s *store) serverUnsubscribed(topics []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for _, t := range topics {
		if t == s.personal {
			// The application dropped it: no longer kept.
			s.personal = ""
			s.names = slices.DeleteFunc(s.names, func(n string) bool { return n == t })
		}
		if !s.server[t] {
			continue
		}
		delete(s.server, t)
		if !s.own(t) {
			delete(s.cursors, t)
			gone = append(gone, t)
		}
	}
	return gone
}

// cursorsCopy is every cursor held.
func (s *store) cursorsCopy() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.cursors))
	for t, c := range s.cursors {
		out[t] = c
	}
	return out
}

func (s *store) cursor(topic string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[topic]
}

func (s *store) namesCopy() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.names)
}
