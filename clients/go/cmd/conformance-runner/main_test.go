package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// startHerald runs the debug gateway in dev mode on loopback ports; its public URL.
func startHerald(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HERALD_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../../../target/debug/herald")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("HERALD_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("no herald binary at %s", bin)
		}
		t.Skipf("no herald binary at %s", bin)
	}
	cmd := exec.Command(bin, "--dev", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	public := regexp.MustCompile(`"public":"([0-9.:]+)"`)
	url := ""
	for i := 0; i < 500 && url == "" && lines.Scan(); i++ {
		if m := public.FindStringSubmatch(lines.Text()); m != nil && strings.Contains(lines.Text(), "herald listening") {
			url = "http://" + m[1]
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for lines.Scan() {
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	if url == "" {
		t.Fatal("herald did not say where it listens")
	}
	return url
}

type lines struct {
	t       *testing.T
	ch      chan map[string]any
	skipped []map[string]any // lines not taken yet, in order
}

// next is the first event line (taken or not yet) that match accepts.
func (l *lines) next(what string, match func(map[string]any) bool) map[string]any {
	l.t.Helper()
	for i, ev := range l.skipped {
		if match(ev) {
			l.skipped = append(l.skipped[:i:i], l.skipped[i+1:]...)
			return ev
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-l.ch:
			if !ok {
				l.t.Fatalf("the runner ended while waiting for %s", what)
			}
			if match(ev) {
				return ev
			}
			l.skipped = append(l.skipped, ev)
		case <-deadline:
			l.t.Fatalf("no %s", what)
		}
	}
}

// The runner speaks RUNNER.md: start, state and message events, publish, history, cursors,
// stats, stop with `closed` and nothing left running.
func TestRunnerContract(t *testing.T) {
	url := startHerald(t)
	for _, format := range []string{"json", "msgpack"} {
		t.Run(format, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ended := make(chan struct{})
			go func() { defer close(ended); run(inR, outW); outW.Close() }()
			l := &lines{t: t, ch: make(chan map[string]any, 100)}
			go func() {
				defer close(l.ch)
				sc := bufio.NewScanner(outR)
				for sc.Scan() {
					var ev map[string]any
					if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev["event"] == nil {
						t.Errorf("not an event line: %s", sc.Text())
						continue
					}
					l.ch <- ev
				}
			}()
			send := func(cmd string) {
				if _, err := inW.Write([]byte(cmd + "\n")); err != nil {
					t.Fatal(err)
				}
			}
			topic := "runner." + format
			send(fmt.Sprintf(`{"cmd":"start","urls":[%q],"topics":[%q],"patterns":["rp.*"],"transports":["ws","sse","poll"],"format":%q,"token":null,"cursors":{},"heartbeat_ms":null,"backoff_ms":[50,500]}`, url, topic, format))
			l.next("connected on ws", func(e map[string]any) bool {
				return e["event"] == "state" && e["state"] == "connected" && e["transport"] == "ws"
			})
			send(fmt.Sprintf(`{"cmd":"publish","topic":%q,"data":{"n":[1,2.5,"x"]},"ref":"p1"}`, topic))
			pub := l.next("published", func(e map[string]any) bool { return e["ref"] == "p1" })
			if pub["event"] != "published" || pub["id"] == nil {
				t.Fatalf("%v", pub)
			}
			msg := l.next("the message", func(e map[string]any) bool { return e["event"] == "message" })
			if msg["topic"] != topic || msg["id"] != pub["id"] || msg["name"] != nil {
				t.Fatalf("%v", msg)
			}
			if b, _ := json.Marshal(msg["data"]); string(b) != `{"n":[1,2.5,"x"]}` {
				t.Fatalf("data %s", b)
			}
			send(`{"cmd":"publish","topic":"bad topic","data":1,"ref":"p2"}`)
			if e := l.next("the refusal", func(e map[string]any) bool { return e["ref"] == "p2" }); e["event"] != "error" {
				t.Fatalf("%v", e)
			}
			send(fmt.Sprintf(`{"cmd":"history","topic":%q,"limit":5,"ref":"h1"}`, topic))
			h := l.next("history", func(e map[string]any) bool { return e["ref"] == "h1" })
			if ms, _ := h["messages"].([]any); h["event"] != "history" || len(ms) != 1 || ms[0].(map[string]any)["id"] != pub["id"] {
				t.Fatalf("%v", h)
			}
			send(`{"cmd":"cursors","ref":"c1"}`)
			c := l.next("cursors", func(e map[string]any) bool { return e["ref"] == "c1" })
			if cur, _ := c["cursors"].(map[string]any); c["event"] != "cursors" || cur[topic] != pub["id"] {
				t.Fatalf("%v", c)
			}
			send(`{"cmd":"stats","ref":"s1"}`)
			st := l.next("stats", func(e map[string]any) bool { return e["ref"] == "s1" })
			for _, k := range []string{"deltas", "delta_failures", "batches"} {
				if _, ok := st[k].(float64); st["event"] != "stats" || !ok {
					t.Fatalf("stats without %s: %v", k, st)
				}
			}
			send(`{"cmd":"stop"}`)
			l.next("closed", func(e map[string]any) bool { return e["event"] == "closed" })
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the runner did not return after stop")
			}
			inW.Close()
			for range l.ch {
			}
		})
	}
}
