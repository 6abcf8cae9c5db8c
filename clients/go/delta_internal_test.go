package heraldpush

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// insertDelta is a valid Fossil delta of target that inserts it whole.
func insertDelta(target []byte) []byte {
	digits := func(v uint64) string {
		const d = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"
		s := ""
		for {
			s = string(d[v&63]) + s
			v >>= 6
			if v == 0 {
				return s
			}
		}
	}
	n := digits(uint64(len(target)))
	return []byte(n + "\n" + n + ":" + string(target) + digits(uint64(FossilChecksum(target))) + ";")
}

func jsonDelta(t *testing.T, topic string, target []byte) frame {
	t.Helper()
	s, _ := json.Marshal(string(insertDelta(target)))
	f, err := decodeJSONFrame([]byte(`{"type":"message","topic":"` + topic + `","id":"e-2","delta":true,"data":` + string(s) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The bases: a delta without a base is a *DeltaError naming the topic; a full message keeps
// the frame's data text (after "data": up to the final }); a failure drops the base; a topic
// that did not ask keeps none.
func TestBases(t *testing.T) {
	b := newBases(func(topic string) bool { return topic == "a" })
	f := jsonDelta(t, "a", []byte(`{"n":2}`))
	var de *DeltaError
	if err := b.apply(&f, false); !errors.As(err, &de) || de.Topic != "a" || !strings.Contains(de.Reason, "no base") {
		t.Fatalf("%v", err)
	}
	full, _ := decodeJSONFrame([]byte(`{"type":"message","topic":"a","id":"e-1","data":{"n":1, "s":"}"}}`))
	if err := b.apply(&full, false); err != nil || string(b.m["a"]) != `{"n":1, "s":"}"}` {
		t.Fatalf("%v %q", err, b.m["a"])
	}
	f = jsonDelta(t, "a", []byte(`{"n":2}`))
	if err := b.apply(&f, false); err != nil || string(f.Data) != `{"n":2}` || f.Delta || string(b.m["a"]) != `{"n":2}` {
		t.Fatalf("%v %s", err, f.Data)
	}
	bad := jsonDelta(t, "a", []byte(`{"n":3}`))
	var s string
	_ = json.Unmarshal(bad.Data, &s)
	bad.Data, _ = json.Marshal(strings.Replace(s, ";", "x;", 1)) // a checksum that is not the result's
	if err := b.apply(&bad, false); err == nil || len(b.m) != 0 {
		t.Fatalf("%v, %d bases", err, len(b.m))
	}
	notJSON := jsonDelta(t, "a", []byte(`{"n":`))
	b.m["a"] = []byte(`{}`)
	if err := b.apply(&notJSON, false); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("%v", err)
	}
	other, _ := decodeJSONFrame([]byte(`{"type":"message","topic":"b","id":"e-1","data":1}`))
	if err := b.apply(&other, false); err != nil || len(b.m) != 0 {
		t.Fatalf("%v, %d bases", err, len(b.m))
	}
	// MessagePack: the base is the data value's bytes; a delta's data is a bin.
	data := map[string]any{"n": 1}
	raw, _ := msgpack.Marshal(map[string]any{"type": "message", "topic": "a", "id": "e-1", "data": data})
	mf, err := decodeMsgpackFrame(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.apply(&mf, true); err != nil {
		t.Fatal(err)
	}
	want, _ := msgpack.Marshal(map[string]any{"n": 2})
	raw, _ = msgpack.Marshal(map[string]any{"type": "message", "topic": "a", "id": "e-2", "delta": true, "data": insertDelta(want)})
	if mf, err = decodeMsgpackFrame(raw); err != nil {
		t.Fatal(err)
	}
	if err := b.apply(&mf, true); err != nil || !bytes.Equal(mf.raw, want) || string(mf.Data) != `{"n":2}` {
		t.Fatalf("%v %s", err, mf.Data)
	}
}
