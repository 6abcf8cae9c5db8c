package heraldpush

// decodeJSONFrame's own scan against encoding/json: on random frames (the gateway's, and
// others: escapes, case variants, unknown keys, nulls, broken text), whatever the scan accepts
// must be what encoding/json makes of it; and the batch frame's splitter against
// encoding/json's reading of the array.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

func randomJSONValue(rng *rand.Rand, depth int) string {
	k := rng.Intn(12)
	if depth > 3 && k >= 9 {
		k = rng.Intn(9)
	}
	switch k {
	case 0:
		return "null"
	case 1:
		return []string{"true", "false", "tru", "nul"}[rng.Intn(4)]
	case 2:
		return []string{"0", "-1", "1.5e3", "12345678901234567890", "01", "1.", "-"}[rng.Intn(7)]
	case 3, 4, 5:
		return randomJSONString(rng)
	case 6, 7, 8:
		return fmt.Sprint(rng.Intn(1000))
	case 9, 10:
		var parts []string
		for n := rng.Intn(4); n > 0; n-- {
			parts = append(parts, randomJSONString(rng)+":"+randomJSONValue(rng, depth+1))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	var parts []string
	for n := rng.Intn(4); n > 0; n-- {
		parts = append(parts, randomJSONValue(rng, depth+1))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func randomJSONString(rng *rand.Rand) string {
	return []string{`"a"`, `""`, `"message"`, `"e-1"`, `"9f-42"`, `"t.x:y@z"`, `"é ü"`, `"\u00e9"`, `"a\"b"`, `"a\\b"`,
		`"a\nb"`, "\"a\tb\"", "\"\xff\"", `"}"`, `"]"`, `","`, `"{["`, `"<&>"`, `"unterminated`}[rng.Intn(19)]
}

func randomJSONFrame(rng *rand.Rand) string {
	keys := []string{"type", "topic", "id", "event", "delta", "data", "reason", "code", "by", "conn", "node", "transport",
		"sub", "info", "topics", "cursors", "user", "expires", "Type", "DATA", "other", "type"}
	ws := []string{"", "", "", " ", "\n\t ", "\r"}
	var parts []string
	for n := rng.Intn(7); n > 0; n-- {
		key := keys[rng.Intn(len(keys))]
		var v string
		switch {
		case rng.Intn(3) == 0:
			v = randomJSONValue(rng, 0)
		case key == "delta":
			v = []string{"true", "false"}[rng.Intn(2)]
		case key == "data" || key == "info":
			v = randomJSONValue(rng, 0)
		default:
			v = randomJSONString(rng)
		}
		parts = append(parts, ws[rng.Intn(len(ws))]+`"`+key+`"`+ws[rng.Intn(len(ws))]+":"+ws[rng.Intn(len(ws))]+v+ws[rng.Intn(len(ws))])
	}
	s := ws[rng.Intn(len(ws))] + "{" + strings.Join(parts, ",") + "}" + ws[rng.Intn(len(ws))]
	switch rng.Intn(10) {
	case 0:
		s = s[:rng.Intn(len(s))]
	case 1:
		b := []byte(s)
		b[rng.Intn(len(b))] = `{}[],:" x\`[rng.Intn(10)]
		s = string(b)
	case 2:
		s += []string{"x", "{}", ",", "]"}[rng.Intn(4)]
	}
	return s
}

func TestFastJSONAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	fast := 0
	for i := 0; i < 50000; i++ {
		text := []byte(randomJSONFrame(rng))
		var got frame
		if !got.fastJSON(text) {
			continue
		}
		fast++
		var want frame
		if err := json.Unmarshal(text, &want); err != nil {
			t.Fatalf("%s: read by the scan, refused by encoding/json: %v", text, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", text, got, want)
		}
	}
	if fast < 5000 {
		t.Fatalf("only %d frames took the scan", fast)
	}
	// The gateway's frames take it.
	for _, s := range []string{
		`{"type":"message","topic":"a","id":"e-1","data":{"n":1,"s":"x\"y"}}`,
		`{"type":"message","topic":"a","id":"e-2","event":"ev","delta":true,"data":"3\n3:abc0;"}`,
		`{"type":"lost","topic":"a","reason":"lagged"}`,
		`{"type":"published","topic":"a","id":"e-3"}`,
		`{"type":"message","topic":"a","id":"e-1","data":null}`,
	} {
		var f frame
		if !f.fastJSON([]byte(s)) {
			t.Errorf("not read by the scan: %s", s)
		}
	}
}

// The splitter: an array it reads element by element is one encoding/json reads with the same
// elements; what it refuses, or an element it gives that decodeJSONFrame refuses, leaves the
// frame malformed.
func TestJSONBatchSplitter(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	read := 0
	for i := 0; i < 30000; i++ {
		var elems []string
		for n := rng.Intn(4); n > 0; n-- {
			if rng.Intn(8) == 0 {
				elems = append(elems, randomJSONValue(rng, 0))
			} else {
				elems = append(elems, randomJSONFrame(rng))
			}
		}
		text := "[" + strings.Join(elems, []string{",", " , ", ",\n"}[rng.Intn(3)]) + "]"
		if rng.Intn(6) == 0 {
			b := []byte(text)
			b[rng.Intn(len(b))] = `{}[],:" x\`[rng.Intn(10)]
			text = string(b)
		}
		r := newJSONFrames([]byte(text))
		var got []json.RawMessage
		var failed error
		for {
			elem, ok, err := r.next()
			if err != nil {
				failed = err
				break
			}
			if !ok {
				break
			}
			if _, err := decodeJSONFrame(elem); err != nil && errors.Is(err, errMalformed) && !strings.Contains(err.Error(), "without") && !strings.Contains(err.Error(), "bad") {
				failed = err
				break
			}
			got = append(got, elem)
		}
		if !r.batch {
			continue
		}
		var want []json.RawMessage
		wantErr := json.Unmarshal([]byte(text), &want)
		if failed == nil {
			read++
			if wantErr != nil || len(want) != len(got) {
				t.Fatalf("%s: read as %d elements, encoding/json: %d, %v", text, len(got), len(want), wantErr)
			}
			for k := range got {
				if !bytes.Equal(got[k], want[k]) {
					t.Fatalf("%s: element %d %s, want %s", text, k, got[k], want[k])
				}
			}
		} else if !errors.Is(failed, errMalformed) {
			t.Fatalf("%s: %v", text, failed)
		}
	}
	if read < 3000 {
		t.Fatalf("only %d arrays read", read)
	}
}
