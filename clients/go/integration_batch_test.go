package heraldpush_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

// Batch frames from a real gateway: 100 messages published in one batch reach a client that
// asked for batches (the default) in a few frames, each message once and in order, JSON and
// MessagePack; a client that did not ask (NoBatch), or that took permessage-deflate, gets
// single frames only.
func TestIntegrationBatchFrames(t *testing.T) {
	h := startHerald(t, "--dev")
	for _, tc := range []struct {
		name     string
		opts     heraldpush.Options
		batching bool
	}{
		{"json", heraldpush.Options{}, true},
		{"msgpack", heraldpush.Options{MsgPack: true}, true},
		{"no-batch", heraldpush.Options{NoBatch: true}, false},
		{"deflate", heraldpush.Options{Compression: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			admin, done := newAdmin(t, h, "")
			defer done()
			topic := "batch." + tc.name
			opts := tc.opts
			opts.URLs, opts.Topics, opts.Transports = []string{h.public}, []string{topic}, []heraldpush.Transport{heraldpush.WebSocket}
			c, ev := newClient(t, opts)
			ev.connected(10*time.Second, heraldpush.WebSocket)
			var batch []heraldpush.PublishMessage
			for i := 0; i < 100; i++ {
				m, _ := heraldpush.NewPublishMessage(topic, "", map[string]any{"n": i})
				batch = append(batch, m)
			}
			results, err := admin.PublishBatch(ctxT(t, 5*time.Second), batch)
			if err != nil || len(results) != 100 {
				t.Fatalf("publish: %d results, %v", len(results), err)
			}
			for i, r := range results {
				m := ev.message(10 * time.Second)
				var v struct{ N int }
				if err := m.Decode(&v); err != nil || m.ID != r.ID || v.N != i {
					t.Fatalf("message %d: %s %s, want %s", i, m.ID, m.Data, r.ID)
				}
			}
			s := c.Stats()
			if tc.batching != (s.Batches > 0) || s.Batches > 100 {
				t.Fatalf("%d batch frames for 100 messages (batches expected: %v)", s.Batches, tc.batching)
			}
			t.Logf("%d batch frames", s.Batches)
			closeClient(t, c, ev)
		})
	}
}
