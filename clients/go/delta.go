package heraldpush

// Delta compression (docs/protocol.md, "Delta compression"): a subscription that asked for
// Fossil deltas may receive a message whose data is a Fossil delta against the data of the
// topic's previous message on the connection. This file applies them: the Fossil decoder, the
// base bytes a delta applies to, and bases, the one base per topic a connection keeps.
//
// The decoder is written here: the Go module centrifuge-go uses (github.com/shadowspore/
// fossil-delta) is not served by the module proxy, and no other maintained one exists. This
// one follows Fossil's delta.c with every read bounds-checked, the claimed size bounded
// before anything is allocated, and every malformed input an error (each step consumes input,
// so it cannot loop).

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vmihailenco/msgpack/v5"
)

// DeltaFossil asks for Fossil deltas (Options.Delta, SubscribeOptions.Delta).
const DeltaFossil = "fossil"

// MaxDeltaTarget is the largest result a delta may claim (64 MiB): past it the delta is
// refused unread.
const MaxDeltaTarget = 64 << 20

// DeltaError is a delta that could not be applied (malformed, too large, a bad checksum, no
// base): reported in an ErrorEvent; nothing of it was delivered, and its topic was subscribed
// again from its cursor, so the message comes again in full.
type DeltaError struct {
	Topic  string
	Reason string
}

func (e *DeltaError) Error() string {
	if e.Topic == "" {
		return "heraldpush: bad delta: " + e.Reason
	}
	return fmt.Sprintf("heraldpush: bad delta of %s: %s", e.Topic, e.Reason)
}

// Stats are the client's counters (Client.Stats).
type Stats struct {
	// Deltas applied.
	Deltas uint64
	// DeltaFailures: deltas that could not be applied (each also an ErrorEvent with a
	// *DeltaError): never delivered; their topics were subscribed again from their cursors.
	DeltaFailures uint64
	// Batches: WebSocket batch frames received (several frames in one, Options.NoBatch).
	Batches uint64
}

type stats struct{ deltas, deltaFailures, batches atomic.Uint64 }

var fossilValue = func() (v [256]int8) {
	for i := range v {
		v[i] = -1
	}
	for i, c := range "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~" {
		v[c] = int8(i)
	}
	return v
}()

// FossilChecksum is Fossil's checksum: the sum of the bytes as big-endian 32-bit words, the
// tail padded with zeros.
func FossilChecksum(b []byte) uint32 {
	var sum uint32
	n4 := len(b) &^ 3
	for i := 0; i < n4; i += 4 {
		sum += uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
	}
	var tail [4]byte
	copy(tail[:], b[n4:])
	sum += uint32(tail[0])<<24 | uint32(tail[1])<<16 | uint32(tail[2])<<8 | uint32(tail[3])
	return sum
}

func deltaErr(format string, args ...any) error {
	return &DeltaError{Reason: fmt.Sprintf(format, args...)}
}

// ApplyFossil applies a Fossil delta to base. It returns a *DeltaError for anything malformed:
// a claimed size over max (MaxDeltaTarget when max <= 0), a copy outside the base, an insert
// past the delta's end, a result not of the claimed size, a bad checksum, no terminator.
func ApplyFossil(base, delta []byte, max int) ([]byte, error) {
	if max <= 0 {
		max = MaxDeltaTarget
	}
	pos := 0
	number := func() (uint64, error) {
		var v uint64
		start := pos
		for pos < len(delta) {
			d := fossilValue[delta[pos]]
			if d < 0 {
				break
			}
			v = v*64 + uint64(d)
			if v > 0xffffffff {
				return 0, deltaErr("a number past 32 bits")
			}
			pos++
		}
		if pos == start {
			return 0, deltaErr("a number expected at byte %d", start)
		}
		return v, nil
	}
	size, err := number()
	if err != nil {
		return nil, err
	}
	if pos >= len(delta) || delta[pos] != '\n' {
		return nil, deltaErr("the size is not followed by a newline")
	}
	pos++
	if size > uint64(max) {
		return nil, deltaErr("claims a result of %d bytes (at most %d)", size, max)
	}
	out := make([]byte, 0, size)
	for pos < len(delta) {
		cnt, err := number()
		if err != nil {
			return nil, err
		}
		if pos >= len(delta) {
			break
		}
		op := delta[pos]
		pos++
		switch op {
		case '@': // copy cnt bytes of the base from an offset, then ','
			ofst, err := number()
			if err != nil {
				return nil, err
			}
			if pos >= len(delta) || delta[pos] != ',' {
				return nil, deltaErr("a copy not ended by ','")
			}
			pos++
			if cnt > size-uint64(len(out)) {
				return nil, deltaErr("a copy past the claimed size")
			}
			if ofst+cnt > uint64(len(base)) {
				return nil, deltaErr("a copy past the end of the base")
			}
			out = append(out, base[ofst:ofst+cnt]...)
		case ':': // insert the cnt bytes that follow
			if cnt > size-uint64(len(out)) {
				return nil, deltaErr("an insert past the claimed size")
			}
			if cnt > uint64(len(delta)-pos) {
				return nil, deltaErr("an insert past the end of the delta")
			}
			out = append(out, delta[pos:pos+int(cnt)]...)
			pos += int(cnt)
		case ';': // the checksum of the result; the end
			if uint64(len(out)) != size {
				return nil, deltaErr("%d bytes made, %d claimed", len(out), size)
			}
			if pos != len(delta) {
				return nil, deltaErr("bytes after the checksum")
			}
			if uint32(cnt) != FossilChecksum(out) {
				return nil, deltaErr("bad checksum")
			}
			return out, nil
		default:
			return nil, deltaErr("unknown command at byte %d", pos-1)
		}
	}
	return nil, deltaErr("no checksum (truncated)")
}

var dataKey = []byte(`"data":`)

// jsonDataText is a JSON message frame's data text, exactly: after the first `"data":` up to
// the frame's final `}` (Herald writes data last).
func jsonDataText(frame []byte) ([]byte, error) {
	at := indexOf(frame, dataKey)
	end := -1
	for i := len(frame) - 1; i >= 0; i-- {
		if frame[i] == '}' {
			end = i
			break
		}
	}
	if at < 0 || end < at+len(dataKey) {
		return nil, deltaErr("a message frame without data")
	}
	return frame[at+len(dataKey) : end], nil
}

func indexOf(b, sub []byte) int {
	for i := 0; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == string(sub) {
			return i
		}
	}
	return -1
}

// bases holds one base per topic (the data of its last message on a connection), for the
// topics that asked for deltas: at most one per subscribed topic, dropped with the topic.
type bases struct {
	wants func(topic string) bool
	mu    sync.Mutex
	m     map[string][]byte
}

func newBases(wants func(string) bool) *bases {
	return &bases{wants: wants, m: map[string][]byte{}}
}

func (b *bases) drop(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, topic)
}

// apply takes a message frame: a delta is applied (f.Data, and f.raw on MessagePack, become
// the full data); the base is kept. It returns a *DeltaError (with the topic) when a delta
// does not apply; the base is gone then.
func (b *bases) apply(f *frame, isMsgpack bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !f.Delta {
		if !b.wants(f.Topic) {
			delete(b.m, f.Topic)
			return nil
		}
		if isMsgpack {
			b.m[f.Topic] = f.raw
			return nil
		}
		text, err := jsonDataText(f.src)
		if err != nil {
			return withTopic(err, f.Topic)
		}
		b.m[f.Topic] = text
		return nil
	}
	base, ok := b.m[f.Topic]
	delete(b.m, f.Topic)
	if !ok {
		return &DeltaError{Topic: f.Topic, Reason: "no base held for the topic"}
	}
	var d []byte
	if isMsgpack {
		if err := msgpack.Unmarshal(f.raw, &d); err != nil {
			return &DeltaError{Topic: f.Topic, Reason: "data is not bin: " + err.Error()}
		}
	} else {
		var s string
		if err := json.Unmarshal(f.Data, &s); err != nil {
			return &DeltaError{Topic: f.Topic, Reason: "data is not a string"}
		}
		d = []byte(s)
	}
	out, err := ApplyFossil(base, d, MaxDeltaTarget)
	if err != nil {
		return withTopic(err, f.Topic)
	}
	if isMsgpack {
		j, err := msgpackToJSON(out)
		if err != nil {
			return &DeltaError{Topic: f.Topic, Reason: "the result is not MessagePack: " + err.Error()}
		}
		f.raw, f.Data = out, j
	} else {
		if !json.Valid(out) {
			return &DeltaError{Topic: f.Topic, Reason: "the result is not JSON"}
		}
		f.Data = out
	}
	f.Delta = false
	if b.wants(f.Topic) {
		b.m[f.Topic] = out
	}
	return nil
}

func withTopic(err error, topic string) error {
	var de *DeltaError
	if errors.As(err, &de) {
		return &DeltaError{Topic: topic, Reason: de.Reason}
	}
	return &DeltaError{Topic: topic, Reason: err.Error()}
}
