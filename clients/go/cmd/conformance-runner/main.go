// Command conformance-runner drives the Go client for the conformance harness, speaking the
// contract of clients/conformance/RUNNER.md: commands on stdin, events on stdout, one JSON
// object per line. It holds no scenario logic: it maps commands to client calls and client
// events to lines.
//
// The optional `start` timings take RUNNER.md's defaults when absent. HERALD_RUNNER_DEBUG=1
// writes every HTTP request and its outcome to stderr (the harness's log).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

type command struct {
	Cmd         string            `json:"cmd"`
	URLs        []string          `json:"urls"`
	Topics      []string          `json:"topics"`
	Patterns    []string          `json:"patterns"`
	Transports  []string          `json:"transports"`
	Format      string            `json:"format"`
	Token       *string           `json:"token"`
	Cursors     map[string]string `json:"cursors"`
	HeartbeatMS *int64            `json:"heartbeat_ms"`
	BackoffMS   []int64           `json:"backoff_ms"`
	Topic       string            `json:"topic"`
	Data        json.RawMessage   `json:"data"`
	Limit       int               `json:"limit"`
	Ref         any               `json:"ref"`
	// Optional start timings (RUNNER.md), in ms.
	OpenTimeoutMS *int64 `json:"open_timeout_ms"`
	StableMS      *int64 `json:"stable_ms"`
	UpgradeMS     *int64 `json:"upgrade_ms"`
	PollTimeoutMS *int64 `json:"poll_timeout_ms"`
	TokenMarginMS *int64 `json:"token_margin_ms"`
	// Delta: "fossil" asks for deltas on every topic and pattern of start.
	Delta string `json:"delta"`
	// Batch: false, the WebSocket does not ask for batch frames; absent or true, it asks
	// (the client's default).
	Batch *bool `json:"batch"`
}

// ms is a start field in ms, def when absent.
func ms(v *int64, def time.Duration) time.Duration {
	if v == nil || *v <= 0 {
		return def
	}
	return time.Duration(*v) * time.Millisecond
}

// out writes one event line at a time, each at once (os.Stdout is not buffered).
type out struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *out) event(fields map[string]any) {
	b, err := json.Marshal(fields)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"event": "error", "code": nil, "reason": err.Error()})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

func (o *out) fail(ref any, err error) {
	ev := map[string]any{"event": "error", "code": nil, "reason": err.Error()}
	var refused *heraldpush.Error
	var closed *heraldpush.CloseError
	switch {
	case errors.As(err, &refused):
		ev["code"], ev["reason"] = refused.Code, refused.Reason
	case errors.As(err, &closed):
		ev["code"], ev["reason"] = closed.Code, closed.Reason
	}
	if ref != nil {
		ev["ref"] = ref
	}
	o.event(ev)
}

func main() { run(os.Stdin, os.Stdout) }

// run speaks the contract on in and stdout until `stop` or the end of in.
func run(stdin io.Reader, stdout io.Writer) {
	o := &out{w: stdout}
	var (
		client   *heraldpush.Client
		tokenMu  sync.Mutex
		token    string
		pumpDone = make(chan struct{})
		work     sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	close(pumpDone) // no client yet

	stop := func() {
		cancel()
		if client != nil {
			_ = client.Close()
		}
		<-pumpDone
		work.Wait()
		// Every goroutine of the client is gone; say so on stderr if not (the harness's log).
		if n := runtime.NumGoroutine(); n > 2 {
			fmt.Fprintf(os.Stderr, "conformance-runner: %d goroutines left after close\n", n)
		}
		o.event(map[string]any{"event": "closed"})
	}

	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 16<<20)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			o.fail(nil, fmt.Errorf("bad command: %w", err))
			continue
		}
		switch cmd.Cmd {
		case "start":
			if client != nil {
				o.fail(cmd.Ref, errors.New("start: already started"))
				continue
			}
			if cmd.Token != nil {
				token = *cmd.Token
			}
			opts := heraldpush.Options{
				URLs:    cmd.URLs,
				Topics:  append(append([]string{}, cmd.Topics...), cmd.Patterns...),
				Cursors: cmd.Cursors,
				MsgPack: cmd.Format == "msgpack",
				TokenFunc: func(context.Context) (string, error) {
					tokenMu.Lock()
					defer tokenMu.Unlock()
					return token, nil
				},
				// RUNNER.md's defaults for the optional timings.
				OpenTimeout:        ms(cmd.OpenTimeoutMS, 3*time.Second),
				StableAfter:        ms(cmd.StableMS, time.Second),
				UpgradeInterval:    ms(cmd.UpgradeMS, 2*time.Second),
				PollTimeout:        ms(cmd.PollTimeoutMS, 5*time.Second),
				TokenRefreshMargin: ms(cmd.TokenMarginMS, 2*time.Second),
				Backoff:            heraldpush.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second},
				Delta:              cmd.Delta,
				NoBatch:            cmd.Batch != nil && !*cmd.Batch,
			}
			if os.Getenv("HERALD_RUNNER_DEBUG") != "" {
				opts.HTTPClient = &http.Client{Transport: logged{http.DefaultTransport.(*http.Transport).Clone()}}
			}
			for _, t := range cmd.Transports {
				opts.Transports = append(opts.Transports, heraldpush.Transport(t))
			}
			if cmd.HeartbeatMS != nil && *cmd.HeartbeatMS > 0 {
				opts.HeartbeatTimeout = time.Duration(*cmd.HeartbeatMS) * time.Millisecond
			}
			if len(cmd.BackoffMS) == 2 {
				opts.Backoff = heraldpush.Backoff{
					Min: time.Duration(cmd.BackoffMS[0]) * time.Millisecond,
					Max: time.Duration(cmd.BackoffMS[1]) * time.Millisecond,
				}
			}
			c, err := heraldpush.New(opts)
			if err != nil {
				o.fail(cmd.Ref, err)
				continue
			}
			client = c
			pumpDone = make(chan struct{})
			go pump(o, c, pumpDone)
		case "token":
			if cmd.Token != nil {
				tokenMu.Lock()
				token = *cmd.Token
				tokenMu.Unlock()
			}
		case "publish", "history", "cursors", "stats":
			if client == nil {
				o.fail(cmd.Ref, errors.New(cmd.Cmd+": not started"))
				continue
			}
			work.Add(1)
			go func(cmd command) {
				defer work.Done()
				request(ctx, o, client, cmd)
			}(cmd)
		case "stop":
			stop()
			return
		default:
			o.fail(cmd.Ref, fmt.Errorf("unknown command %q", cmd.Cmd))
		}
	}
	// stdin closed: as stop.
	stop()
}

func request(ctx context.Context, o *out, c *heraldpush.Client, cmd command) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch cmd.Cmd {
	case "publish":
		data := cmd.Data
		if data == nil {
			data = json.RawMessage("null")
		}
		r, err := c.Publish(rctx, cmd.Topic, data)
		if err != nil {
			o.fail(cmd.Ref, err)
			return
		}
		o.event(map[string]any{"event": "published", "ref": cmd.Ref, "id": r.ID})
	case "history":
		page, err := c.History(rctx, cmd.Topic, heraldpush.HistoryOptions{Limit: cmd.Limit})
		if err != nil {
			o.fail(cmd.Ref, err)
			return
		}
		msgs := make([]map[string]any, 0, len(page.Messages))
		for _, m := range page.Messages {
			msgs = append(msgs, map[string]any{"id": m.ID, "data": m.Data})
		}
		o.event(map[string]any{"event": "history", "ref": cmd.Ref, "messages": msgs})
	case "cursors":
		o.event(map[string]any{"event": "cursors", "ref": cmd.Ref, "cursors": c.Cursors()})
	case "stats":
		s := c.Stats()
		o.event(map[string]any{"event": "stats", "ref": cmd.Ref, "deltas": s.Deltas, "delta_failures": s.DeltaFailures,
			"batches": s.Batches})
	}
}

// pump writes the client's events until its channel closes.
func pump(o *out, c *heraldpush.Client, done chan struct{}) {
	defer close(done)
	for ev := range c.Events() {
		switch ev := ev.(type) {
		case *heraldpush.StateChange:
			var transport any
			if ev.Transport != "" && ev.State != heraldpush.StateDisconnected && ev.State != heraldpush.StateClosed {
				transport = string(ev.Transport)
			}
			o.event(map[string]any{"event": "state", "state": string(ev.State), "transport": transport})
		case *heraldpush.Message:
			var name any
			if ev.Event != "" {
				name = ev.Event
			}
			o.event(map[string]any{"event": "message", "topic": ev.Topic, "id": ev.ID, "name": name, "data": ev.Data})
		case *heraldpush.Lost:
			o.event(map[string]any{"event": "lost", "topic": ev.Topic, "reason": ev.Reason})
		case *heraldpush.ErrorEvent:
			o.fail(nil, ev.Err)
		}
	}
}

// logged writes each HTTP request and its outcome to stderr (HERALD_RUNNER_DEBUG=1).
type logged struct{ next http.RoundTripper }

func (l logged) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	fmt.Fprintf(os.Stderr, "%s -> %s %s\n", start.Format("15:04:05.000"), r.Method, r.URL)
	res, err := l.next.RoundTrip(r)
	status := 0
	if res != nil {
		status = res.StatusCode
	}
	fmt.Fprintf(os.Stderr, "%s <- %s %d %v (%v)\n", time.Now().Format("15:04:05.000"), r.URL.Path, status, err, time.Since(start))
	return res, err
}
