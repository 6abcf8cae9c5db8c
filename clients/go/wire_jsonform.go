package heraldpush

// The JSON form of a MessagePack value (Message.Data on a `herald.msgpack` connection), as the
// gateway gives it and as encoding/json would write the decoded value, but written in one
// pass from the MessagePack bytes (mpReader, wire_msgpack.go).

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// msgpackToJSON gives a MessagePack value its JSON form, as the gateway does: string map keys
// (sorted, the last of equal keys kept), `bin` as standard padded base64, finite floats, no
// extension types, nested at most 64 deep. The text is encoding/json's for the same values
// (its escaping of strings, its numbers), written in one pass.
func msgpackToJSON(raw []byte) ([]byte, error) {
	return appendMsgpackJSON(make([]byte, 0, len(raw)+len(raw)/2+8), raw)
}

// appendMsgpackJSON appends the JSON form of the MessagePack value raw to dst.
func appendMsgpackJSON(dst, raw []byte) ([]byte, error) {
	r := mpReader{b: raw}
	out, err := r.appendJSON(dst, 0)
	if err != nil {
		return nil, err
	}
	if r.i != len(raw) {
		return nil, errors.New("bytes after the value")
	}
	return out, nil
}

func (r *mpReader) appendJSON(dst []byte, depth int) ([]byte, error) {
	if depth > 64 {
		return nil, errors.New("nested deeper than 64")
	}
	if r.i >= len(r.b) {
		return nil, errShort
	}
	c := r.b[r.i]
	switch {
	case c <= 0x7f:
		r.i++
		return strconv.AppendUint(dst, uint64(c), 10), nil
	case c >= 0xe0:
		r.i++
		return strconv.AppendInt(dst, int64(int8(c)), 10), nil
	case c == 0xc0:
		r.i++
		return append(dst, "null"...), nil
	case c == 0xc2:
		r.i++
		return append(dst, "false"...), nil
	case c == 0xc3:
		r.i++
		return append(dst, "true"...), nil
	case c >= 0xcc && c <= 0xcf:
		r.i++
		u, err := r.uintN(1 << (c - 0xcc))
		return strconv.AppendUint(dst, u, 10), err
	case c >= 0xd0 && c <= 0xd3:
		r.i++
		size := 1 << (c - 0xd0)
		u, err := r.uintN(size)
		return strconv.AppendInt(dst, signExtend(u, size), 10), err
	case c == 0xca, c == 0xcb:
		r.i++
		var f float64
		if c == 0xca {
			u, err := r.uintN(4)
			if err != nil {
				return nil, err
			}
			f = float64(math.Float32frombits(uint32(u)))
		} else {
			u, err := r.uintN(8)
			if err != nil {
				return nil, err
			}
			f = math.Float64frombits(u)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("a float that is not finite")
		}
		return appendJSONFloat(dst, f), nil
	case c&0xe0 == 0xa0, c == 0xd9, c == 0xda, c == 0xdb:
		s, _, err := r.strBytes()
		if err != nil {
			return nil, err
		}
		return appendJSONString(dst, s), nil
	case c == 0xc4, c == 0xc5, c == 0xc6:
		r.i++
		n, err := r.uintN(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		b, err := r.bytesN(n)
		if err != nil {
			return nil, err
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"'), nil
	}
	if n, ok, err := r.containerLen(false); err != nil {
		return nil, err
	} else if ok {
		dst = append(dst, '[')
		for k := uint64(0); k < n; k++ {
			if k > 0 {
				dst = append(dst, ',')
			}
			if dst, err = r.appendJSON(dst, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	}
	if n, ok, err := r.containerLen(true); err != nil {
		return nil, err
	} else if ok {
		return r.appendJSONObject(dst, n, depth)
	}
	if c == 0xc1 {
		return nil, fmt.Errorf("invalid code %#x", c)
	}
	return nil, errors.New("an extension type has no JSON form")
}

// appendJSONObject writes a map of n entries as a JSON object, its keys sorted (as
// encoding/json writes a Go map): the entries are found first (nothing copied), then each
// value is written in the keys' order.
func (r *mpReader) appendJSONObject(dst []byte, n uint64, depth int) ([]byte, error) {
	type entry struct {
		key        []byte
		start, end int // the value's bytes in r.b
	}
	var stack [16]entry
	entries := stack[:0]
	sorted := true
	for k := uint64(0); k < n; k++ {
		kb, isStr, err := r.strBytes()
		if err != nil {
			return nil, err
		}
		if !isStr || kb == nil {
			return nil, errors.New("a map key that is not a string")
		}
		start := r.i
		if err := r.skip(depth + 1); err != nil {
			return nil, err
		}
		if len(entries) > 0 && bytes.Compare(entries[len(entries)-1].key, kb) >= 0 {
			sorted = false
		}
		entries = append(entries, entry{kb, start, r.i})
	}
	end := r.i
	if !sorted {
		slices.SortStableFunc(entries, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
		// The last of equal keys wins, as in a Go map.
		kept := entries[:0]
		for i, e := range entries {
			if i+1 < len(entries) && bytes.Equal(entries[i+1].key, e.key) {
				// Not written (as a Go map would drop it), but an extension type in it is
				// still refused.
				r.i, r.noExt = e.start, true
				err := r.skip(depth + 1)
				r.noExt = false
				if err != nil {
					return nil, err
				}
				continue
			}
			kept = append(kept, e)
		}
		entries = kept
	}
	dst = append(dst, '{')
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, e.key)
		dst = append(dst, ':')
		r.i = e.start // the value, known to end at e.end
		var err error
		if dst, err = r.appendJSON(dst, depth+1); err != nil {
			return nil, err
		}
	}
	r.i = end
	return append(dst, '}'), nil
}

// appendJSONFloat writes f as encoding/json does.
func appendJSONFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 as e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string as encoding/json does: `<`, `>`, `&`, U+2028 and
// U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
