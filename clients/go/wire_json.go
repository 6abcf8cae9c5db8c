package heraldpush

// JSON WebSocket frames (and the SSE and poll message objects, which have their shape): one
// object, or an array of objects on the WebSocket (a batch frame). A message frame as the
// gateway writes it is read by a scan of its own (decodeJSONFrame); anything else goes
// through encoding/json.

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeJSONFrame reads a JSON WebSocket frame (or an SSE/poll message object).
func decodeJSONFrame(b []byte) (frame, error) {
	var f frame
	if !f.fastJSON(b) {
		var err error
		if f, err = slowJSON(b); err != nil {
			return frame{}, err
		}
	}
	f.src = b
	return f, f.check()
}

func slowJSON(b []byte) (frame, error) {
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, malformed("not a JSON frame: %v", err)
	}
	return f, nil
}

// fastJSON reads the frames the gateway sends most (message frames, full or delta; loss
// signals; replies without lists) without reflection: an object whose keys are among the
// fields below, in their exact spelling, whose strings have no escapes and are valid UTF-8,
// with `delta` a bool and `data` any valid JSON value (checked by json.Valid). It reports
// false, f left in any state, for anything else, which encoding/json then reads: what it
// accepts, encoding/json would have read the same (tested against it).
func (f *frame) fastJSON(b []byte) bool {
	i := skipJSONSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipJSONSpace(b, i+1) == len(b)
	}
	for {
		key, next, ok := plainJSONString(b, i)
		if !ok {
			return false
		}
		i = skipJSONSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipJSONSpace(b, i+1)
		var field *string
		switch string(key) {
		case "type":
			field = &f.Type
		case "topic":
			field = &f.Topic
		case "id":
			field = &f.ID
		case "event":
			field = &f.Event
		case "reason":
			field = &f.Reason
		case "code":
			field = &f.Code
		case "by":
			field = &f.By
		case "conn":
			field = &f.Conn
		case "node":
			field = &f.Node
		case "transport":
			field = &f.Transport
		case "sub":
			field = &f.Sub
		case "delta":
			switch {
			case len(b)-i >= 4 && string(b[i:i+4]) == "true":
				f.Delta, i = true, i+4
			case len(b)-i >= 5 && string(b[i:i+5]) == "false":
				f.Delta, i = false, i+5
			default:
				return false
			}
		case "data", "info":
			end := jsonValueEnd(b, i)
			if end < 0 || !json.Valid(b[i:end]) {
				return false
			}
			v := json.RawMessage(append(make([]byte, 0, end-i), b[i:end]...))
			if key[0] == 'd' {
				f.Data = v
			} else {
				f.Info = v
			}
			i = end
		default:
			return false
		}
		if field != nil {
			s, next, ok := plainJSONString(b, i)
			if !ok {
				return false
			}
			*field, i = internJSON(s), next
		}
		i = skipJSONSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipJSONSpace(b, i+1)
		case '}':
			return skipJSONSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// plainJSONString reads the JSON string at b[i]: its text, and the index after its closing
// quote; ok is false when there is none, or when it has an escape, a control character or
// invalid UTF-8 (encoding/json reads those).
func plainJSONString(b []byte, i int) (text []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			text = b[i+1 : j]
			if !ascii && !utf8.Valid(text) {
				return nil, 0, false
			}
			return text, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}

// internJSON: the values that come in every frame are not allocated again and again.
func internJSON(b []byte) string {
	switch string(b) {
	case "message":
		return "message"
	case "lost":
		return "lost"
	case "subscribed":
		return "subscribed"
	case "unsubscribed":
		return "unsubscribed"
	case "published":
		return "published"
	case "server":
		return "server"
	}
	return string(b)
}

// jsonValueEnd is the index after the JSON value that starts at b[i], found by following
// strings and nesting only (json.Valid checks it), or -1.
func jsonValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return -1
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				for j++; j < len(b) && b[j] != '"'; j++ {
					if b[j] == '\\' {
						j++
					}
				}
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isJSONSpace(b[j]) {
		j++
	}
	return j
}

// jsonFrames reads the frames of a JSON WebSocket frame: one object, or an array of objects
// (a batch frame, docs/protocol.md "Batch frames"). The array is not decoded as a whole: each
// element is found by a scan that only follows strings and nesting (no copy), then decoded
// alone, when its turn comes (decodeJSONFrame checks it fully).
type jsonFrames struct {
	b     []byte
	i     int  // where the next element starts
	batch bool // an array
	done  bool
	k     int // elements read
}

func newJSONFrames(b []byte) jsonFrames {
	i := skipJSONSpace(b, 0)
	if i < len(b) && b[i] == '[' {
		return jsonFrames{b: b, i: skipJSONSpace(b, i+1), batch: true}
	}
	return jsonFrames{b: b}
}

// next gives the next frame's text; ok is false once there is none. An element that is not
// an object, or an array that is not one, is an error (errMalformed).
func (r *jsonFrames) next() (elem []byte, ok bool, err error) {
	if r.done {
		return nil, false, nil
	}
	if !r.batch {
		r.done = true
		return r.b, true, nil
	}
	if r.k == 0 && r.i < len(r.b) && r.b[r.i] == ']' { // []
		r.done = true
		if skipJSONSpace(r.b, r.i+1) != len(r.b) {
			return nil, false, malformed("bytes after a batch frame's array")
		}
		return nil, false, nil
	}
	end := jsonElementEnd(r.b, r.i)
	if end < 0 {
		r.done = true
		return nil, false, malformed("a batch frame that is not a JSON array")
	}
	elem = r.b[r.i:end]
	for len(elem) > 0 && isJSONSpace(elem[len(elem)-1]) {
		elem = elem[:len(elem)-1]
	}
	if len(elem) == 0 || elem[0] != '{' {
		r.done = true
		return nil, false, malformed("element %d of a batch frame is not an object", r.k)
	}
	r.k++
	if r.b[end] == ']' {
		r.done = true
		if skipJSONSpace(r.b, end+1) != len(r.b) {
			return nil, false, malformed("bytes after a batch frame's array")
		}
	} else {
		r.i = skipJSONSpace(r.b, end+1)
	}
	return elem, true, nil
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// jsonElementEnd is the index of the `,` or `]` that ends the array element starting at i
// (outside strings, at its nesting level), or -1 when there is none.
func jsonElementEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}':
			if depth == 0 {
				return -1
			}
			depth--
		case ']':
			if depth == 0 {
				return i
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}
