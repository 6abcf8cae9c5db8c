package heraldpush_test

// A real Herald for the integration tests: the debug binary (HERALD_BIN, default
// target/debug/herald of the repository) on ports the kernel picks, its addresses read from
// its `herald listening` log line. Without the binary the integration tests are skipped,
// unless HERALD_REQUIRE_INTEGRATION=1 (deploy/test.sh), which makes them fail.

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

type herald struct {
	cmd    *exec.Cmd
	public string // http://127.0.0.1:PORT
	admin  string
	done   chan struct{}
}

func heraldBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HERALD_BIN")
	if bin == "" {
		abs, _ := filepath.Abs("../../target/debug/herald")
		bin = abs
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("HERALD_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("no herald binary at %s (HERALD_BIN)", bin)
		}
		t.Skipf("no herald binary at %s: build it (cargo build --bin herald) or set HERALD_BIN", bin)
	}
	return bin
}

// startHerald runs a gateway with extra flags, stopped when the test ends.
func startHerald(t *testing.T, flags ...string) *herald {
	t.Helper()
	bin := heraldBinary(t)
	args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json", "--log-filter", "info"}, flags...)
	cmd := exec.Command(bin, args...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") && !strings.HasPrefix(kv, "RUST_LOG") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &herald{cmd: cmd, done: make(chan struct{})}
	lines := bufio.NewScanner(stderr)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	var seen []string
	found := false
	for i := 0; i < 500 && lines.Scan(); i++ {
		line := lines.Text()
		if strings.Contains(line, "herald listening") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("listening line: %v: %s", err, line)
			}
			h.public = "http://" + findString(rec, "public")
			h.admin = "http://" + findString(rec, "admin")
			found = true
			break
		}
		seen = append(seen, line)
	}
	if !found {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("herald did not say where it listens: %v", seen)
	}
	// Read its log to the end, so it never blocks on a full pipe.
	go func() {
		defer close(h.done)
		for lines.Scan() {
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *herald) stop() {
	_ = h.cmd.Process.Kill()
	<-h.done
}

// findString is the string value of key anywhere in a decoded JSON object.
func findString(v any, key string) string {
	switch v := v.(type) {
	case map[string]any:
		if s, ok := v[key].(string); ok {
			return s
		}
		for _, x := range v {
			if s := findString(x, key); s != "" {
				return s
			}
		}
	case []any:
		for _, x := range v {
			if s := findString(x, key); s != "" {
				return s
			}
		}
	}
	return ""
}

const testSecret = "a-test-secret-that-is-at-least-32-bytes-long"

// jwt is an HS256 token with claims.
func jwt(claims map[string]any) string {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body, _ := json.Marshal(claims)
	unsigned := header + "." + enc.EncodeToString(body)
	mac := hmac.New(sha256.New, []byte(testSecret))
	mac.Write([]byte(unsigned))
	return unsigned + "." + enc.EncodeToString(mac.Sum(nil))
}

// events reads a client's events in the background, for assertions with deadlines.
type events struct {
	t  *testing.T
	ch <-chan heraldpush.Event
}

func watch(t *testing.T, c *heraldpush.Client) *events { return &events{t: t, ch: c.Events()} }

// next is the next event that match accepts (others are skipped), or fails after timeout.
func (e *events) next(timeout time.Duration, what string, match func(heraldpush.Event) bool) heraldpush.Event {
	e.t.Helper()
	deadline := time.After(timeout)
	var skipped []string
	for {
		select {
		case ev, ok := <-e.ch:
			if !ok {
				e.t.Fatalf("events closed while waiting for %s (skipped %v)", what, skipped)
			}
			if match(ev) {
				return ev
			}
			skipped = append(skipped, describe(ev))
		case <-deadline:
			e.t.Fatalf("no %s within %v (skipped %v)", what, timeout, skipped)
		}
	}
}

func describe(ev heraldpush.Event) string {
	switch ev := ev.(type) {
	case *heraldpush.Message:
		return "message " + ev.Topic + " " + ev.ID + " " + string(ev.Data)
	case *heraldpush.Lost:
		return "lost " + ev.Topic + " " + ev.Reason
	case *heraldpush.StateChange:
		return "state " + string(ev.State) + " " + string(ev.Transport)
	case *heraldpush.ErrorEvent:
		return "error " + ev.Err.Error()
	case *heraldpush.ServerSubscription:
		return "server " + strings.Join(ev.Topics, ",")
	case *heraldpush.MemberEvent:
		return "member " + ev.Topic
	}
	return "?"
}

func (e *events) connected(timeout time.Duration, transport heraldpush.Transport) {
	e.t.Helper()
	e.next(timeout, "connected on "+string(transport), func(ev heraldpush.Event) bool {
		s, ok := ev.(*heraldpush.StateChange)
		return ok && s.State == heraldpush.StateConnected && s.Transport == transport
	})
}

func (e *events) message(timeout time.Duration) *heraldpush.Message {
	e.t.Helper()
	return e.next(timeout, "a message", func(ev heraldpush.Event) bool {
		_, ok := ev.(*heraldpush.Message)
		return ok
	}).(*heraldpush.Message)
}

func (e *events) lost(timeout time.Duration) *heraldpush.Lost {
	e.t.Helper()
	return e.next(timeout, "a loss signal", func(ev heraldpush.Event) bool {
		_, ok := ev.(*heraldpush.Lost)
		return ok
	}).(*heraldpush.Lost)
}

// drain reads what is left until the channel closes (after Close), within timeout.
func (e *events) drain(timeout time.Duration) {
	e.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-e.ch:
			if !ok {
				return
			}
		case <-deadline:
			e.t.Fatalf("events not closed within %v", timeout)
		}
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
