// ws-echo-go: a Go WebSocket gateway in the shape of the Go gateways Herald replaces, for W4
// (the echo workload) to be measured beside Herald in the same sitting instead of against
// figures from another day.
//
// It is the gorilla/websocket chat-example design those gateways follow: one goroutine reading
// each connection and one writing it, a buffered channel of outgoing frames between them, a
// ping every 30 s from the writer and a read deadline that pongs extend, 2 KiB read and write
// buffers. It speaks the part of Herald's protocol W4 uses: `GET /v1/ws` upgrades, each text
// frame is decoded as a JSON command, and `{"type":"ping","data":D}` is answered with
// `{"type":"pong","data":D}` (D as the client sent it); any other command gets an error frame.
//
// With --inline the reader writes each answer itself under the connection's write lock
// (no channel hand-off; the writer goroutine only pings, under the same lock): the leanest
// Go shape, to bound how much of Go's cost is the design rather than the language.
//
//	go build -o /tmp/ws-echo-go ./deploy/bench/ws-echo-go
//	/tmp/ws-echo-go --listen 127.0.0.1:18080
//	herald-loadgen echo --url http://127.0.0.1:18080 --conns 5000 --rate 40000 --size 256 \
//	  --duration 30s --server-pid $(pgrep ws-echo-go)
//
// Loopback only.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const (
	pingEvery   = 30 * time.Second
	idleTimeout = 75 * time.Second
	writeWait   = 10 * time.Second
	maxMessage  = 64 * 1024
	sendQueue   = 256
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  2048,
	WriteBufferSize: 2048,
	CheckOrigin:     func(*http.Request) bool { return true },
}

// command is a client's frame; Data is kept as sent.
type command struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
}

type reply struct {
	Type   string          `json:"type"`
	Data   json.RawMessage `json:"data,omitempty"`
	Code   string          `json:"code,omitempty"`
	Reason string          `json:"reason,omitempty"`
}

type client struct {
	conn *websocket.Conn
	send chan []byte
	// Held by whoever writes (the reader too, with --inline).
	write sync.Mutex
}

var inline = flag.Bool("inline", false, "answer from the reader goroutine (no writer goroutine)")

func (c *client) readPump() {
	defer func() {
		close(c.send)
		c.conn.Close()
	}()
	c.conn.SetReadLimit(maxMessage)
	c.conn.SetReadDeadline(time.Now().Add(idleTimeout))
	c.conn.SetPongHandler(func(string) error {
		return c.conn.SetReadDeadline(time.Now().Add(idleTimeout))
	})
	for {
		_, frame, err := c.conn.ReadMessage()
		if err != nil {
			return
		}
		c.conn.SetReadDeadline(time.Now().Add(idleTimeout))
		var cmd command
		var out reply
		if err := json.Unmarshal(frame, &cmd); err != nil {
			out = reply{Type: "error", Code: "bad_frame", Reason: err.Error()}
		} else if cmd.Type == "ping" {
			out = reply{Type: "pong", Data: cmd.Data}
		} else {
			out = reply{Type: "error", Code: "unknown_command", Reason: "only ping is served here"}
		}
		encoded, err := json.Marshal(out)
		if err != nil {
			return
		}
		if *inline {
			if c.writeFrame(websocket.TextMessage, encoded) != nil {
				return
			}
			continue
		}
		select {
		case c.send <- encoded:
		default:
			return // a client that does not read its answers is dropped
		}
	}
}

// writeFrame writes one frame under the connection's write lock (taken by the reader too
// with --inline, uncontended otherwise).
func (c *client) writeFrame(kind int, data []byte) error {
	c.write.Lock()
	defer c.write.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(writeWait))
	return c.conn.WriteMessage(kind, data)
}

// writePump writes the queued answers (none with --inline: the reader writes them) and a
// ping every pingEvery, until the reader closes the queue.
func (c *client) writePump() {
	ticker := time.NewTicker(pingEvery)
	defer func() {
		ticker.Stop()
		c.conn.Close()
	}()
	for {
		select {
		case frame, ok := <-c.send:
			if !ok {
				c.writeFrame(websocket.CloseMessage, []byte{})
				return
			}
			if c.writeFrame(websocket.TextMessage, frame) != nil {
				return
			}
		case <-ticker.C:
			if c.writeFrame(websocket.PingMessage, nil) != nil {
				return
			}
		}
	}
}

func serveWs(w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered with the error
	}
	c := &client{conn: conn, send: make(chan []byte, sendQueue)}
	go c.writePump()
	go c.readPump()
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18080", "address to serve (loopback)")
	flag.Parse()
	host, _, err := net.SplitHostPort(*listen)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		fmt.Fprintln(os.Stderr, "ws-echo-go: --listen must be a loopback address")
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/ws", serveWs)
	fmt.Printf("ws-echo-go: WebSocket on %s/v1/ws\n", *listen)
	log.Fatal(http.ListenAndServe(*listen, mux))
}
