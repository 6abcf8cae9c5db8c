package heraldpush

// The `herald.msgpack` WebSocket frames (docs/protocol.md, "MessagePack"), read straight from
// the frame's bytes: a frame is one map with string keys, or an array of such maps (a batch
// frame); a message's `data` is kept as sent and given its JSON form in one pass
// (wire_jsonform.go), without decoding it into Go values first.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

var errShort = errors.New("truncated")

// mpReader reads MessagePack values from a byte slice.
type mpReader struct {
	b     []byte
	i     int
	noExt bool // skip refuses extension types
}

func (r *mpReader) byte1() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *mpReader) bytesN(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.i) {
		return nil, errShort
	}
	v := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return v, nil
}

func (r *mpReader) uintN(size int) (uint64, error) {
	v, err := r.bytesN(uint64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(v[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(v)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(v)), nil
	}
	return binary.BigEndian.Uint64(v), nil
}

// isNil reads a nil if one is next.
func (r *mpReader) isNil() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// containerLen reads the length of a map (wantMap) or an array; ok is false when the next
// value is something else (nothing read then).
func (r *mpReader) containerLen(wantMap bool) (n uint64, ok bool, err error) {
	if r.i >= len(r.b) {
		return 0, false, errShort
	}
	c := r.b[r.i]
	fix, c16, c32 := byte(0x90), byte(0xdc), byte(0xdd)
	if wantMap {
		fix, c16, c32 = 0x80, 0xde, 0xdf
	}
	switch {
	case c&0xf0 == fix:
		r.i++
		return uint64(c & 0x0f), true, nil
	case c == c16:
		r.i++
		n, err = r.uintN(2)
	case c == c32:
		r.i++
		n, err = r.uintN(4)
	default:
		return 0, false, nil
	}
	// Each entry takes at least one byte (two for a map): a length past what is left is a
	// lie, refused before anything is sized by it.
	if err == nil && n > uint64(len(r.b)-r.i) {
		err = errShort
	}
	return n, err == nil, err
}

// str reads a str (or nil, as ""); anything else is an error.
func (r *mpReader) str() (string, error) {
	b, isStr, err := r.strBytes()
	if err != nil {
		return "", err
	}
	if !isStr {
		return "", errors.New("not a string")
	}
	return string(b), nil
}

// strBytes reads a str's bytes (isStr), or a nil (isStr and no bytes); isStr is false for
// anything else (nothing read then).
func (r *mpReader) strBytes() (b []byte, isStr bool, err error) {
	if r.i >= len(r.b) {
		return nil, false, errShort
	}
	c := r.b[r.i]
	var n uint64
	switch {
	case c == 0xc0:
		r.i++
		return nil, true, nil
	case c&0xe0 == 0xa0:
		r.i++
		n = uint64(c & 0x1f)
	case c == 0xd9, c == 0xda, c == 0xdb:
		r.i++
		if n, err = r.uintN(1 << (c - 0xd9)); err != nil {
			return nil, false, err
		}
	default:
		return nil, false, nil
	}
	b, err = r.bytesN(n)
	return b, err == nil, err
}

// skip passes over one value, nested at most 64 deep.
func (r *mpReader) skip(depth int) error {
	if depth > 64 {
		return errors.New("nested deeper than 64")
	}
	c, err := r.byte1()
	if err != nil {
		return err
	}
	var n uint64 // bytes to pass over
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return nil
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c&0xf0 == 0x80, c&0xf0 == 0x90, c == 0xdc, c == 0xdd, c == 0xde, c == 0xdf:
		r.i--
		isMap := c&0xf0 == 0x80 || c == 0xde || c == 0xdf
		count, _, err := r.containerLen(isMap)
		if err != nil {
			return err
		}
		if isMap {
			count *= 2
		}
		for k := uint64(0); k < count; k++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c == 0xc4, c == 0xc5, c == 0xc6, c == 0xd9, c == 0xda, c == 0xdb:
		size := 1
		switch c {
		case 0xc5, 0xda:
			size = 2
		case 0xc6, 0xdb:
			size = 4
		}
		if n, err = r.uintN(size); err != nil {
			return err
		}
	case r.noExt && (c >= 0xc7 && c <= 0xc9 || c >= 0xd4 && c <= 0xd8):
		return errors.New("an extension type has no JSON form")
	case c == 0xc7, c == 0xc8, c == 0xc9: // ext 8/16/32: length, type, data
		if n, err = r.uintN(1 << (c - 0xc7)); err != nil {
			return err
		}
		n++
	case c >= 0xd4 && c <= 0xd8: // fixext: type, then 1/2/4/8/16 bytes
		n = 1 + 1<<(c-0xd4)
	case c == 0xca:
		n = 4
	case c == 0xcb:
		n = 8
	case c >= 0xcc && c <= 0xcf:
		n = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		n = 1 << (c - 0xd0)
	default: // 0xc1, never used
		return fmt.Errorf("invalid code %#x", c)
	}
	_, err = r.bytesN(n)
	return err
}

// raw reads one value and returns its bytes.
func (r *mpReader) raw() ([]byte, error) {
	start := r.i
	if err := r.skip(0); err != nil {
		return nil, err
	}
	return r.b[start:r.i], nil
}

// int64v reads an integer (or a float, truncated).
func (r *mpReader) int64v() (int64, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c == 0xc0:
		return 0, nil
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xcc && c <= 0xcf:
		u, err := r.uintN(1 << (c - 0xcc))
		return int64(u), err
	case c >= 0xd0 && c <= 0xd3:
		size := 1 << (c - 0xd0)
		u, err := r.uintN(size)
		return signExtend(u, size), err
	case c == 0xca:
		u, err := r.uintN(4)
		return int64(math.Float32frombits(uint32(u))), err
	case c == 0xcb:
		u, err := r.uintN(8)
		return int64(math.Float64frombits(u)), err
	}
	return 0, fmt.Errorf("not an integer (%#x)", c)
}

func signExtend(u uint64, size int) int64 {
	switch size {
	case 1:
		return int64(int8(u))
	case 2:
		return int64(int16(u))
	case 4:
		return int64(int32(u))
	}
	return int64(u)
}

func (r *mpReader) boolv() (bool, error) {
	c, err := r.byte1()
	if err != nil {
		return false, err
	}
	switch c {
	case 0xc0, 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	}
	return false, fmt.Errorf("not a bool (%#x)", c)
}

// msgpackFrames reads the frames of a `herald.msgpack` WebSocket frame: one map, or an array
// of maps (a batch frame, docs/protocol.md "Batch frames"), each read when its turn comes.
type msgpackFrames struct {
	r       mpReader
	batch   bool   // an array
	n, k    uint64 // its length, elements read
	done    bool
	initErr error
}

func newMsgpackFrames(b []byte) msgpackFrames {
	m := msgpackFrames{r: mpReader{b: b}}
	n, isArray, err := m.r.containerLen(false)
	if err != nil {
		m.initErr = malformed("not a MessagePack map or array")
	}
	m.batch, m.n = isArray, n
	return m
}

// next reads the next frame into f; ok is false once there is none. An element that is not
// a map, or bytes after the frame, is an error (errMalformed).
func (m *msgpackFrames) next(f *frame) (ok bool, err error) {
	switch {
	case m.done:
		return false, nil
	case m.initErr != nil:
		m.done = true
		return false, m.initErr
	case !m.batch:
		m.done = true
		if err := m.r.frame(f); err != nil {
			return false, err
		}
		if m.r.i != len(m.r.b) {
			return false, malformed("bytes after the frame's map")
		}
		return true, nil
	case m.k == m.n:
		m.done = true
		if m.r.i != len(m.r.b) {
			return false, malformed("bytes after the batch frame's array")
		}
		return false, nil
	}
	if err := m.r.frame(f); err != nil {
		m.done = true
		return false, fmt.Errorf("%w (element %d of a batch frame)", err, m.k)
	}
	m.k++
	return true, nil
}

// decodeMsgpackFrame reads a frame that is one map (tests).
func decodeMsgpackFrame(b []byte) (frame, error) {
	var f frame
	m := newMsgpackFrames(b)
	if m.batch {
		return frame{}, malformed("not a MessagePack map")
	}
	if _, err := m.next(&f); err != nil {
		return frame{}, err
	}
	return f, nil
}

// frame reads one map with string keys. The message's `data` is kept as sent (frame.raw, a
// copy) and given its JSON form (frame.Data).
func (r *mpReader) frame(f *frame) error {
	*f = frame{}
	n, isMap, err := r.containerLen(true)
	if err != nil || !isMap {
		return malformed("not a MessagePack map")
	}
	for k := uint64(0); k < n; k++ {
		kb, isStr, err := r.strBytes()
		if err != nil || !isStr {
			return malformed("a map key that is not a string")
		}
		key := frameKey(kb)
		var ferr error
		switch key {
		case "type":
			f.Type, ferr = r.str()
		case "topic":
			f.Topic, ferr = r.str()
		case "id":
			f.ID, ferr = r.str()
		case "event":
			f.Event, ferr = r.str()
		case "reason":
			f.Reason, ferr = r.str()
		case "code":
			f.Code, ferr = r.str()
		case "by":
			f.By, ferr = r.str()
		case "conn":
			f.Conn, ferr = r.str()
		case "node":
			f.Node, ferr = r.str()
		case "transport":
			f.Transport, ferr = r.str()
		case "sub":
			f.Sub, ferr = r.str()
		case "user":
			var u string
			u, ferr = r.str()
			if ferr == nil && u != "" {
				f.User = &u
			}
		case "data", "info":
			var raw []byte
			if raw, ferr = r.raw(); ferr == nil {
				// One allocation: the payload as sent (copied), then its JSON form.
				buf := append(make([]byte, 0, len(raw)*5/2+16), raw...)
				var j []byte
				if j, ferr = appendMsgpackJSON(buf[len(raw):], raw); ferr == nil {
					if key == "data" {
						f.raw, f.Data = buf[:len(raw):len(raw)], j
					} else {
						f.Info = j
					}
				}
			}
		case "topics":
			f.Topics, ferr = r.strings()
		case "cursors":
			f.Cursor, ferr = r.stringMap()
		case "expires":
			f.Expires, ferr = r.int64v()
		case "delta":
			f.Delta, ferr = r.boolv()
		default:
			ferr = r.skip(0)
		}
		if ferr != nil {
			return malformed("field %q: %v", key, ferr)
		}
	}
	return f.check()
}

// frameKeys: the keys a frame's map may have, so that reading one allocates nothing.
var frameKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"type", "topic", "id", "event", "reason", "code", "by", "conn", "node", "transport",
		"sub", "user", "data", "info", "topics", "cursors", "expires", "delta"} {
		m[k] = k
	}
	return m
}()

func frameKey(b []byte) string {
	if k, ok := frameKeys[string(b)]; ok {
		return k
	}
	return string(b)
}

// strings reads an array of str (or nil).
func (r *mpReader) strings() ([]string, error) {
	if r.isNil() {
		return nil, nil
	}
	n, ok, err := r.containerLen(false)
	if err != nil || !ok {
		return nil, errors.New("not an array of strings")
	}
	out := make([]string, 0, n)
	for k := uint64(0); k < n; k++ {
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// stringMap reads a map of str to str (or nil).
func (r *mpReader) stringMap() (map[string]string, error) {
	if r.isNil() {
		return nil, nil
	}
	n, ok, err := r.containerLen(true)
	if err != nil || !ok {
		return nil, errors.New("not a map of strings")
	}
	out := make(map[string]string, n)
	for k := uint64(0); k < n; k++ {
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		if out[key], err = r.str(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
