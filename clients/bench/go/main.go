// Command heraldbench is the Go side of clients/bench/cpu.py (docs/benchmarks/clients.md):
// a subscriber process (Herald's Go client or centrifuge-go, N subscriptions on one
// connection) that reports its own CPU time per delivered message, and a fixed-rate publisher.
//
//	heraldbench sub herald     URL N EXPECT TIMEOUT_S
//	heraldbench sub centrifuge URL N EXPECT TIMEOUT_S TOKEN
//	heraldbench pub herald     ADMIN_URL      N M RATE PAYLOAD_BYTES [BATCH]
//	heraldbench pub centrifuge API_URL API_KEY N M RATE PAYLOAD_BYTES [BATCH]
//
// Binary subscribers: `sub herald-msgpack` (the herald.msgpack WebSocket, Options.MsgPack) and
// `sub centrifuge-protobuf` (centrifuge-go's Protobuf client). BATCH > 1 publishes BATCH
// consecutive messages per HTTP request (Herald's POST /v1/publish/batch, Centrifugo's
// POST /api/batch), one request every BATCH/RATE seconds, so the delivered rate stays RATE.
//
// Channels are bench.0 .. bench.N-1 (Herald topics; on Centrifugo in the namespace `bench`,
// bench:0 ..). Message k goes to channel k mod N with data {"ch":c,"seq":s,"pad":"..."}, s
// counting from 1 per channel; the subscriber checks every channel's seq goes up by one.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/centrifugal/centrifuge-go"
	"github.com/heraldpush/heraldpush-go"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func out(v any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		die("not a number: %q", s)
	}
	return n
}

// seqOf reads "ch" and "seq" from the payload without a JSON decode (the same few bytes of
// work for both clients; a decode would cost more than the clients themselves).
func seqOf(data []byte) (int, int) {
	num := func(key string) int {
		i := bytes.Index(data, []byte(key))
		if i < 0 {
			return -1
		}
		n := 0
		for _, c := range data[i+len(key):] {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	return num(`"ch":`), num(`"seq":`)
}

// checker counts deliveries and per-channel order; safe for concurrent use.
type checker struct {
	mu       sync.Mutex
	next     []int
	received atomic.Int64
	gaps     int
	dups     int
	bad      int
	expect   int64
	done     chan struct{}
	once     sync.Once
}

func newChecker(n, expect int) *checker {
	c := &checker{next: make([]int, n), expect: int64(expect), done: make(chan struct{})}
	for i := range c.next {
		c.next[i] = 1
	}
	return c
}

func (c *checker) on(data []byte) {
	ch, seq := seqOf(data)
	c.mu.Lock()
	switch {
	case ch < 0 || ch >= len(c.next) || seq < 0:
		c.bad++
	case seq == c.next[ch]:
		c.next[ch]++
	case seq > c.next[ch]:
		c.gaps++
		c.next[ch] = seq + 1
	default:
		c.dups++
	}
	c.mu.Unlock()
	if c.received.Add(1) >= c.expect {
		c.once.Do(func() { close(c.done) })
	}
}

func sub(args []string) {
	if len(args) < 5 {
		die("sub herald|centrifuge URL N EXPECT TIMEOUT_S [TOKEN]")
	}
	kind, url, n, expect, timeout := args[0], args[1], atoi(args[2]), atoi(args[3]), atoi(args[4])
	chk := newChecker(n, expect)
	var closeFn func()
	switch kind {
	case "herald", "herald-msgpack":
		topics := make([]string, n)
		for i := range topics {
			topics[i] = fmt.Sprintf("bench.%d", i)
		}
		c, err := heraldpush.New(heraldpush.Options{URLs: []string{url}, Topics: topics,
			Transports: []heraldpush.Transport{heraldpush.WebSocket}, MsgPack: kind == "herald-msgpack"})
		if err != nil {
			die("heraldpush: %v", err)
		}
		connected := make(chan struct{})
		var once sync.Once
		go func() {
			for ev := range c.Events() {
				switch e := ev.(type) {
				case *heraldpush.Message:
					chk.on(e.Data)
				case *heraldpush.StateChange:
					if e.State == heraldpush.StateConnected {
						once.Do(func() { close(connected) })
					}
				case *heraldpush.Lost:
					fmt.Fprintf(os.Stderr, "lost: %+v\n", e)
				}
			}
		}()
		select {
		case <-connected:
		case <-time.After(20 * time.Second):
			die("herald: not connected")
		}
		closeFn = func() { c.Close() }
	case "centrifuge", "centrifuge-protobuf":
		if len(args) < 6 {
			die("centrifuge needs a TOKEN")
		}
		c := centrifuge.NewJsonClient(url, centrifuge.Config{Token: args[5]})
		if kind == "centrifuge-protobuf" {
			c = centrifuge.NewProtobufClient(url, centrifuge.Config{Token: args[5]})
		}
		if err := c.Connect(); err != nil {
			die("centrifuge connect: %v", err)
		}
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			s, err := c.NewSubscription(fmt.Sprintf("bench:%d", i))
			if err != nil {
				die("centrifuge subscription: %v", err)
			}
			s.OnPublication(func(e centrifuge.PublicationEvent) { chk.on(e.Data) })
			wg.Add(1)
			var once sync.Once
			s.OnSubscribed(func(centrifuge.SubscribedEvent) { once.Do(wg.Done) })
			if err := s.Subscribe(); err != nil {
				die("centrifuge subscribe: %v", err)
			}
		}
		ok := make(chan struct{})
		go func() { wg.Wait(); close(ok) }()
		select {
		case <-ok:
		case <-time.After(20 * time.Second):
			die("centrifuge: not subscribed")
		}
		closeFn = func() { c.Close() }
	default:
		die("unknown client %q", kind)
	}
	// Settle, then the measured span: from "ready" until the last expected message.
	time.Sleep(300 * time.Millisecond)
	cpu0, t0 := cpuSeconds(), time.Now()
	out(map[string]any{"ready": true})
	timedOut := false
	select {
	case <-chk.done:
	case <-time.After(time.Duration(timeout) * time.Second):
		timedOut = true
	}
	cpu1, t1 := cpuSeconds(), time.Now()
	time.Sleep(200 * time.Millisecond) // anything past the expected count (duplicates)
	chk.mu.Lock()
	res := map[string]any{"received": chk.received.Load(), "cpu_s": cpu1 - cpu0, "wall_s": t1.Sub(t0).Seconds(),
		"gaps": chk.gaps, "dups": chk.dups, "bad": chk.bad, "timed_out": timedOut}
	chk.mu.Unlock()
	out(res)
	closeFn()
}

func pub(args []string) {
	var (
		kind       = args[0]
		url, key   string
		n, m, rate int
		payload    int
		batch      = 1
		rest       []string
	)
	switch kind {
	case "herald":
		url, n, m, rate, payload, rest = args[1], atoi(args[2]), atoi(args[3]), atoi(args[4]), atoi(args[5]), args[6:]
	case "centrifuge":
		url, key, n, m, rate, payload, rest = args[1], args[2], atoi(args[3]), atoi(args[4]), atoi(args[5]), atoi(args[6]), args[7:]
	default:
		die("unknown server %q", kind)
	}
	if len(rest) > 0 {
		batch = max(1, atoi(rest[0]))
	}
	switch {
	case kind == "herald" && batch > 1:
		url += "/v1/publish/batch"
	case kind == "herald":
		url += "/v1/publish"
	case batch > 1:
		url += "/api/batch"
	default:
		url += "/api/publish"
	}
	// W workers, each owning the channels c with c mod W == w, so every channel's order holds.
	w := 8
	if n < w {
		w = n
	}
	tr := &http.Transport{MaxIdleConnsPerHost: w, Proxy: nil}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	queues := make([]chan []int, w)
	var wg sync.WaitGroup
	var failed atomic.Int64
	one := func(k int) string {
		ch, seq := k%n, k/n+1
		head := fmt.Sprintf(`{"ch":%d,"seq":%d,"pad":"`, ch, seq)
		data := head + strings.Repeat("x", max(0, payload-len(head)-2)) + `"}`
		switch {
		case kind == "herald":
			return fmt.Sprintf(`{"topic":"bench.%d","data":%s}`, ch, data)
		case batch > 1:
			return fmt.Sprintf(`{"publish":{"channel":"bench:%d","data":%s}}`, ch, data)
		default:
			return fmt.Sprintf(`{"channel":"bench:%d","data":%s}`, ch, data)
		}
	}
	for i := range queues {
		queues[i] = make(chan []int, 4096)
		wg.Add(1)
		go func(q chan []int) {
			defer wg.Done()
			for ks := range q {
				var body string
				if batch == 1 {
					body = one(ks[0])
				} else {
					parts := make([]string, len(ks))
					for j, k := range ks {
						parts[j] = one(k)
					}
					if kind == "herald" {
						body = `{"messages":[` + strings.Join(parts, ",") + `]}`
					} else {
						body = `{"commands":[` + strings.Join(parts, ",") + `]}`
					}
				}
				req, _ := http.NewRequestWithContext(context.Background(), "POST", url, strings.NewReader(body))
				req.Header.Set("content-type", "application/json")
				if key != "" {
					req.Header.Set("X-API-Key", key)
				}
				resp, err := hc.Do(req)
				if err != nil {
					failed.Add(int64(len(ks)))
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 300 || bytes.Contains(b, []byte(`"error"`)) {
					if failed.Add(int64(len(ks))) < 5*int64(len(ks)) {
						fmt.Fprintf(os.Stderr, "publish: %d %.300s\n", resp.StatusCode, b)
					}
				}
			}
		}(queues[i])
	}
	t0 := time.Now()
	for k := 0; k < m; k += batch {
		if d := time.Until(t0.Add(time.Duration(float64(k) / float64(rate) * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		// This tick's messages, split by the worker that owns their channel.
		parts := make([][]int, w)
		for j := k; j < min(k+batch, m); j++ {
			parts[(j%n)%w] = append(parts[(j%n)%w], j)
		}
		for i, ks := range parts {
			if len(ks) > 0 {
				queues[i] <- ks
			}
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	out(map[string]any{"published": m, "failed": failed.Load(), "seconds": el, "rate": float64(m) / el, "batch": batch})
}

func main() {
	if len(os.Args) < 3 {
		die("heraldbench sub|pub ...")
	}
	switch os.Args[1] {
	case "sub":
		sub(os.Args[2:])
	case "pub":
		pub(os.Args[2:])
	default:
		die("heraldbench sub|pub ...")
	}
}
