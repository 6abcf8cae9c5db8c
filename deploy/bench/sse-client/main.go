// sse-client: an independent SSE fan-out client (Go standard library only) for W2, to check
// herald-loadgen's CPU-per-delivery figures against a client that shares none of its code.
//
// It opens --conns SSE streams of one topic (spread over source addresses 127.0.0.1..x),
// publishes --rate messages/s for --duration through the admin API, counts every delivered
// event and its publish-to-read latency, and reads the server's CPU time (utime+stime of
// /proc/<pid>/stat) over the publishing window, as herald-loadgen does:
//
//	go run . --url http://127.0.0.1:40000 --publish-url http://127.0.0.1:40100 \
//	  --conns 15000 --source-ips 4 --rate 2 --duration 60s --server-pid PID
//
// Loopback only; every loop is bounded by --duration.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("url", "http://127.0.0.1:40000", "SSE server (loopback)")
	publishURL := flag.String("publish-url", "http://127.0.0.1:40100", "admin publish API (loopback)")
	conns := flag.Int("conns", 15000, "SSE connections")
	sourceIPs := flag.Int("source-ips", 4, "spread connections over 127.0.0.1..N")
	topic := flag.String("topic", "w2", "topic (or prefix pattern, e.g. w2.*) to subscribe to")
	publishTopic := flag.String("publish-topic", "", "topic to publish to (default: --topic)")
	rate := flag.Float64("rate", 2, "publishes per second")
	duration := flag.Duration("duration", 60*time.Second, "publishing time")
	serverPid := flag.Int("server-pid", 0, "server process to read CPU time of")
	flag.Parse()

	if *publishTopic == "" {
		*publishTopic = *topic
	}
	u, err := url.Parse(*target)
	if err != nil || !net.ParseIP(u.Hostname()).IsLoopback() {
		fail("--url must be a loopback http:// address")
	}
	if p, err := url.Parse(*publishURL); err != nil || !net.ParseIP(p.Hostname()).IsLoopback() {
		fail("--publish-url must be a loopback http:// address")
	}
	var delivered atomic.Int64
	var mu sync.Mutex
	var latencies []float64 // ms, one per delivery with a readable publish time
	var open []net.Conn     // closed at the end, which ends the readers
	var readers sync.WaitGroup
	ready := make(chan error, *conns)
	request := fmt.Sprintf("GET /v1/sse?topic=%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", *topic, u.Host)
	for i := 0; i < *conns; i++ {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%*sourceIPs))}
		readers.Add(1)
		go func() {
			defer readers.Done()
			d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
			c, err := d.Dial("tcp", u.Host)
			if err != nil {
				ready <- err
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			if _, err := c.Write([]byte(request)); err != nil {
				ready <- err
				return
			}
			r := bufio.NewReaderSize(c, 4096)
			status, err := r.ReadString('\n')
			if err != nil || !strings.Contains(status, " 200") {
				ready <- fmt.Errorf("status %q: %v", status, err)
				return
			}
			for { // the response head
				line, err := r.ReadString('\n')
				if err != nil {
					ready <- err
					return
				}
				if line == "\r\n" || line == "\n" {
					break
				}
			}
			ready <- nil
			local := make([]float64, 0, 256)
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					break
				}
				if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
					delivered.Add(1)
					if sent, ok := sentAt(data); ok {
						local = append(local, float64(time.Now().UnixMicro()-sent)/1000)
					}
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}
	for i := 0; i < *conns; i++ {
		if err := <-ready; err != nil {
			fail("connect: " + err.Error())
		}
	}
	fmt.Printf("%d connections ready\n", *conns)
	time.Sleep(2 * time.Second) // let the server settle after the connect burst

	cpuBefore := cpuSeconds(*serverPid)
	start := time.Now()
	interval := time.Duration(float64(time.Second) / *rate)
	published := 0
	client := &http.Client{Timeout: 10 * time.Second}
	for next := start; time.Since(start) < *duration; next = next.Add(interval) {
		time.Sleep(time.Until(next))
		body := fmt.Sprintf(`{"topic":%q,"data":{"t":%d}}`, *publishTopic, time.Now().UnixMicro())
		resp, err := client.Post(*publishURL+"/v1/publish", "application/json", strings.NewReader(body))
		if err != nil {
			fail("publish: " + err.Error())
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			fail("publish: status " + resp.Status)
		}
		published++
	}
	expected := int64(published) * int64(*conns)
	deadline := time.Now().Add(10 * time.Second)
	for delivered.Load() < expected && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cpu := cpuSeconds(*serverPid) - cpuBefore
	got := delivered.Load()
	fmt.Printf("delivered %d / %d\n", got, expected)
	if *serverPid != 0 && got > 0 {
		fmt.Printf("server CPU %.2f s over %.1f s: %.2f us per delivery\n", cpu, time.Since(start).Seconds(), cpu*1e6/float64(got))
	}
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	readers.Wait()
	sort.Float64s(latencies)
	fmt.Printf("latency ms p50 %.1f p99 %.1f p99.9 %.1f max %.1f (%d samples)\n",
		percentile(latencies, 0.5), percentile(latencies, 0.99), percentile(latencies, 0.999),
		percentile(latencies, 1), len(latencies))
	if got != expected {
		os.Exit(1)
	}
}

// sentAt reads the publish time from a `{"t":<unix µs>}` payload.
func sentAt(data []byte) (int64, bool) {
	i := bytes.Index(data, []byte(`"t":`))
	if i < 0 {
		return 0, false
	}
	rest := data[i+4:]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// cpuSeconds is utime+stime of a process (fields 14 and 15 of /proc/<pid>/stat, in clock ticks
// of 1/100 s on Linux).
func cpuSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fail("read server stat: " + err.Error())
	}
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "sse-client: "+msg)
	os.Exit(1)
}
