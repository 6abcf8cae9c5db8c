package heraldpush

// The MessagePack reader against the msgpack module: random values given their JSON form by
// the reader (one pass) and by the way the client did it before (decode into Go values, then
// encoding/json), byte for byte; and the frame reader against crafted and truncated input.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// refMsgpackToJSON is how the client made the JSON form before wire_msgpack.go.
func refMsgpackToJSON(raw []byte) ([]byte, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(raw))
	dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
	v, err := dec.DecodeInterfaceLoose()
	if err != nil {
		return nil, err
	}
	j, err := refJSONForm(v, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

func refJSONForm(v any, depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("nested deeper than 64")
	}
	switch v := v.(type) {
	case nil, bool, string, int64, uint64:
		return v, nil
	case int8:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case int:
		return int64(v), nil
	case uint8:
		return uint64(v), nil
	case uint16:
		return uint64(v), nil
	case uint32:
		return uint64(v), nil
	case uint:
		return uint64(v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, errors.New("a float that is not finite")
		}
		return v, nil
	case float32:
		return refJSONForm(float64(v), depth)
	case []byte:
		return base64.StdEncoding.EncodeToString(v), nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = refJSONForm(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("a map key that is not a string (%T)", k)
			}
			var err error
			if out[ks], err = refJSONForm(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			var err error
			if out[k], err = refJSONForm(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no JSON form for %T", v)
}

// randomValue makes a MessagePack value of every kind the gateway may send, and some it may
// not (non-string keys, extension types, duplicate keys, invalid UTF-8, NaN).
func randomValue(rng *rand.Rand, enc *msgpack.Encoder, depth int) {
	k := rng.Intn(20)
	if depth > 4 && k >= 14 {
		k = rng.Intn(14)
	}
	strs := []string{"", "a", "zz", "<b>&\"x\"\\\n\t\u2028é", "\xff\xfe", "\x01\x1f", "key", "Key", strings.Repeat("s", 40)}
	switch k {
	case 0:
		_ = enc.EncodeNil()
	case 1:
		_ = enc.EncodeBool(rng.Intn(2) == 0)
	case 2:
		_ = enc.EncodeInt(rng.Int63n(200) - 100)
	case 3:
		_ = enc.EncodeInt(rng.Int63() - rng.Int63())
	case 4:
		_ = enc.EncodeUint(rng.Uint64())
	case 5:
		_ = enc.EncodeFloat64([]float64{0, -0.0, 1.5, 1e21, 1e-7, 123456789.125, -3e-300, math.MaxFloat64, rng.NormFloat64() * 1e6, math.NaN()}[rng.Intn(10)])
	case 6:
		_ = enc.EncodeFloat32([]float32{0.1, 1e-7, 3.5e30, -2, float32(math.Inf(1))}[rng.Intn(5)])
	case 7, 8:
		_ = enc.EncodeString(strs[rng.Intn(len(strs))])
	case 9:
		b := make([]byte, rng.Intn(300))
		rng.Read(b)
		_ = enc.EncodeBytes(b)
	case 10:
		_ = enc.EncodeInt(int64(rng.Intn(1 << 20)))
	case 11:
		_ = enc.EncodeUint(uint64(rng.Intn(300)))
	case 12:
		_ = enc.EncodeString(strings.Repeat("x", rng.Intn(70000)*(rng.Intn(20)/19)))
	case 13:
		_ = enc.EncodeExtHeader(int8(rng.Intn(5)), 1)
		_, _ = enc.Writer().Write([]byte{1}) // the ext's byte
	case 14, 15, 16:
		n := rng.Intn(6)
		if rng.Intn(30) == 0 {
			n = 17 + rng.Intn(3) // map16
		}
		_ = enc.EncodeMapLen(n)
		for i := 0; i < n; i++ {
			if rng.Intn(60) == 0 {
				_ = enc.EncodeInt(int64(i))
			} else {
				_ = enc.EncodeString(strs[rng.Intn(len(strs))] + fmt.Sprint(rng.Intn(4)))
			}
			randomValue(rng, enc, depth+1)
		}
	default:
		n := rng.Intn(5)
		if rng.Intn(30) == 0 {
			n = 16 + rng.Intn(3) // array16
		}
		_ = enc.EncodeArrayLen(n)
		for i := 0; i < n; i++ {
			randomValue(rng, enc, depth+1)
		}
	}
}

func TestMsgpackToJSONAsBefore(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	agreed, refused := 0, 0
	for i := 0; i < 20000; i++ {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		randomValue(rng, enc, 0)
		raw := buf.Bytes()
		want, wantErr := refMsgpackToJSON(raw)
		if raw[0] >= 0xc4 && raw[0] <= 0xc6 {
			// A bin as the whole value: the module's loose decoding made it a string (its
			// bytes as UTF-8, replaced where invalid); it is base64 as everywhere else now.
			var b []byte
			_ = msgpack.Unmarshal(raw, &b)
			want, wantErr = []byte(`"`+base64.StdEncoding.EncodeToString(b)+`"`), nil
		}
		got, err := msgpackToJSON(raw)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("value %d %x:\n got %s (%v)\nwant %s (%v)", i, raw, got, err, want, wantErr)
		}
		if err == nil {
			agreed++
			if !json.Valid(got) {
				t.Fatalf("not JSON: %s", got)
			}
		} else {
			refused++
		}
		// Truncated: an error, never a panic.
		if len(raw) > 1 {
			if _, err := msgpackToJSON(raw[:rng.Intn(len(raw)-1)+1]); err == nil && wantErr == nil {
				// A prefix may be a whole value of its own only when raw has bytes after it.
				r := mpReader{b: raw}
				if r.skip(0) == nil && r.i == len(raw) {
					t.Fatalf("a truncated value read: %x", raw)
				}
			}
		}
	}
	if agreed < 5000 || refused < 500 {
		t.Fatalf("%d agreed, %d refused: the generator is off", agreed, refused)
	}
	// Nested 65 deep: refused, as before.
	deep := bytes.Repeat([]byte{0x91}, 65)
	deep = append(deep, 1)
	if _, err := msgpackToJSON(deep); err == nil {
		t.Fatal("65 deep accepted")
	}
	if _, err := msgpackToJSON(deep[1:]); err != nil {
		t.Fatal(err)
	}
	// A length past the end is refused before anything is sized by it.
	for _, b := range [][]byte{{0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0x7f, 0xff, 0xff, 0xff}, {0xc6, 0xff, 0xff, 0xff, 0xff}} {
		if _, err := msgpackToJSON(b); !errors.Is(err, errShort) {
			t.Fatalf("%x: %v", b, err)
		}
	}
}
