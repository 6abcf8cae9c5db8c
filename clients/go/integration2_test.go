package heraldpush_test

// Integration tests against a real Herald: fallback and probing back up through a proxy that
// blocks WebSocket upgrades, tokens, the admin API, subscriptions changed on a live client.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

// gate is a reverse proxy in front of a gateway that can refuse WebSocket upgrades with 502,
// as a proxy that does not pass them does.
func gate(t *testing.T, upstream string, blockWS *atomic.Bool) *httptest.Server {
	t.Helper()
	u, _ := url.Parse(upstream)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = http.DefaultTransport.(*http.Transport).Clone()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/ws" && blockWS.Load() {
			http.Error(w, "no upgrades here", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		rp.Transport.(*http.Transport).CloseIdleConnections()
	})
	return srv
}

// WebSocket blocked: SSE; WebSocket back: the client probes it and moves up, losing nothing
// and delivering nothing twice.
func TestIntegrationFallbackAndProbeBackUp(t *testing.T) {
	h := startHerald(t, "--dev")
	var blockWS atomic.Bool
	blockWS.Store(true)
	g := gate(t, h.public, &blockWS)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "")
	defer done()
	c, ev := newClient(t, heraldpush.Options{
		URLs: []string{g.URL}, Topics: []string{"fb"}, Backoff: fast, UpgradeInterval: 300 * time.Millisecond,
	})
	ev.connected(10*time.Second, heraldpush.SSE)
	var ids []string
	publish := func(n int) {
		for i := 0; i < n; i++ {
			r, err := admin.Publish(ctxT(t, 5*time.Second), "fb", len(ids))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
	}
	publish(3)
	var got []string
	for len(got) < 3 {
		got = append(got, ev.message(10*time.Second).ID)
	}
	blockWS.Store(false)
	publish(2)
	// Messages published meanwhile arrive once, whichever connection brings them.
	ev.next(10*time.Second, "the move to the WebSocket", func(e heraldpush.Event) bool {
		if m, ok := e.(*heraldpush.Message); ok {
			got = append(got, m.ID)
		}
		s, ok := e.(*heraldpush.StateChange)
		return ok && s.State == heraldpush.StateConnected && s.Transport == heraldpush.WebSocket
	})
	publish(3)
	for len(got) < len(ids) {
		got = append(got, ev.message(10*time.Second).ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("got %v, published %v", got, ids)
	}
	if _, tr := c.State(); tr != heraldpush.WebSocket {
		t.Fatal(tr)
	}
	closeClient(t, c, ev)
}

// Tokens: a private topic with a token; a token about to expire is replaced on the open
// WebSocket (an `auth` frame) without a reconnect; the admin API reaches the user's
// connection (server-side subscribe, send, disconnect).
func TestIntegrationTokensAndAdmin(t *testing.T) {
	h := startHerald(t, "--auth-hs256-secret", testSecret, "--admin-api-keys", "an-admin-key-of-16-or-more", "--auth-api-keys", "a-publish-key-of-16-or-more")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "an-admin-key-of-16-or-more")
	defer done()
	// Without the key: refused with the gateway's code.
	noKey, done2 := newAdmin(t, h, "")
	defer done2()
	_, err := noKey.Publish(ctxT(t, 5*time.Second), "x", 1)
	var refused *heraldpush.Error
	if !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized {
		t.Fatalf("no key: %v", err)
	}

	var issued atomic.Int32
	tokenFunc := func(context.Context) (string, error) {
		issued.Add(1)
		// Expires in 35 s: with the 34 s margin below, refreshed about a second from now.
		return jwt(map[string]any{"sub": "ann", "exp": time.Now().Add(35 * time.Second).Unix(), "topics": []string{"priv.*", "news"}}), nil
	}
	c, ev := newClient(t, heraldpush.Options{
		URLs: []string{h.public}, Topics: []string{"priv.a"}, Transports: []heraldpush.Transport{heraldpush.WebSocket},
		TokenFunc: tokenFunc, TokenRefreshMargin: 34 * time.Second, APIKey: "a-publish-key-of-16-or-more",
	})
	ev.connected(10*time.Second, heraldpush.WebSocket)
	deadline := time.Now().Add(10 * time.Second)
	for issued.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := issued.Load(); n < 3 {
		t.Fatalf("token fetched %d times, want it refreshed", n)
	}
	// Still on the first connection: no state change, and it delivers.
	r, err := admin.Publish(ctxT(t, 5*time.Second), "priv.a", "after refresh")
	if err != nil {
		t.Fatal(err)
	}
	m := ev.next(10*time.Second, "the message", func(e heraldpush.Event) bool {
		if s, ok := e.(*heraldpush.StateChange); ok {
			t.Errorf("a state change after a token refresh: %+v", s)
		}
		if e, ok := e.(*heraldpush.ErrorEvent); ok {
			t.Errorf("an error after a token refresh: %v", e.Err)
		}
		_, ok := e.(*heraldpush.Message)
		return ok
	}).(*heraldpush.Message)
	if m.ID != r.ID {
		t.Fatal(m.ID)
	}
	// Publish over HTTP with the API key (the token has no publish claim; SSE would not
	// carry it either way): here the WebSocket refuses it, forbidden.
	if _, err := c.Publish(ctxT(t, 5*time.Second), "priv.a", 1); !errors.As(err, &refused) || refused.Code != "forbidden" {
		t.Fatalf("publish without a publish claim: %v", err)
	}

	// The application subscribes the user to a topic, sends to it, reads presence.
	if n, err := admin.SubscribeUser(ctxT(t, 5*time.Second), "ann", "news"); err != nil || n != 1 {
		t.Fatalf("subscribe: %d %v", n, err)
	}
	sub := ev.next(10*time.Second, "the server subscription", func(e heraldpush.Event) bool {
		_, ok := e.(*heraldpush.ServerSubscription)
		return ok
	}).(*heraldpush.ServerSubscription)
	if !sub.Subscribed || !slices.Equal(sub.Topics, []string{"news"}) {
		t.Fatalf("%+v", sub)
	}
	if _, err := admin.Publish(ctxT(t, 5*time.Second), "news", "pushed"); err != nil {
		t.Fatal(err)
	}
	if m := ev.message(10 * time.Second); m.Topic != "news" || !m.Server {
		t.Fatalf("%+v", m)
	}
	sent, err := admin.SendUser(ctxT(t, 5*time.Second), "ann", "note", map[string]any{"hi": 1})
	if err != nil || sent.Topic != "user:ann" || sent.Here != 1 {
		t.Fatalf("send: %+v %v", sent, err)
	}
	if m := ev.message(10 * time.Second); m.Topic != "user:ann" || m.ID != sent.ID || m.Event != "note" || !m.Server {
		t.Fatalf("%+v", m)
	}
	conns, err := admin.UserConnections(ctxT(t, 5*time.Second), "ann")
	if err != nil || len(conns) != 1 {
		t.Fatalf("connections: %v %v", conns, err)
	}
	p, err := admin.Presence(ctxT(t, 5*time.Second), "priv.a")
	if err != nil || p.Subscribers != 1 {
		t.Fatalf("presence: %+v %v", p, err)
	}
	batch := []heraldpush.PublishMessage{}
	for _, topic := range []string{"priv.a", "bad topic"} {
		m, _ := heraldpush.NewPublishMessage(topic, "", 7)
		batch = append(batch, m)
	}
	results, err := admin.PublishBatch(ctxT(t, 5*time.Second), batch)
	if err != nil || len(results) != 2 || results[0].Err != nil || results[1].Err == nil || results[1].Err.Code != "bad_topic" {
		t.Fatalf("batch: %+v %v", results, err)
	}
	if m := ev.message(10 * time.Second); m.ID != results[0].ID {
		t.Fatal(m.ID)
	}
	page, err := admin.History(ctxT(t, 5*time.Second), "priv.a", heraldpush.HistoryOptions{Limit: 10})
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("history: %+v %v", page, err)
	}
	// Banned: the client closes for good and says why.
	no := false
	if n, err := admin.DisconnectUser(ctxT(t, 5*time.Second), "ann", heraldpush.Disconnect{Reason: "banned", Reconnect: &no}); err != nil || n != 1 {
		t.Fatalf("disconnect: %d %v", n, err)
	}
	ev.next(10*time.Second, "the ban", func(e heraldpush.Event) bool {
		s, ok := e.(*heraldpush.StateChange)
		return ok && s.State == heraldpush.StateClosed
	})
	ev.drain(5 * time.Second)
	_ = c.Close()
}

// Subscriptions added and dropped on a live client, on every transport.
func TestIntegrationSubscribeLive(t *testing.T) {
	h := startHerald(t, "--dev")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "")
	defer done()
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE, heraldpush.LongPoll} {
		a, b := "live.a."+string(tr), "live.b."+string(tr)
		c, ev := newClient(t, heraldpush.Options{URLs: []string{h.public}, Topics: []string{a}, Transports: []heraldpush.Transport{tr}, PollTimeout: time.Second})
		ev.connected(10*time.Second, tr)
		if err := c.Subscribe(b); err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe("bad*"); err == nil {
			t.Fatal("a bad pattern was accepted")
		}
		// Until the new topic is subscribed, what is published to it may not arrive: publish
		// until it does.
		var got *heraldpush.Message
		for i := 0; i < 50 && got == nil; i++ {
			r, err := admin.Publish(ctxT(t, 5*time.Second), b, i)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case e := <-c.Events():
				if m, ok := e.(*heraldpush.Message); ok && m.ID == r.ID {
					got = m
				}
			case <-time.After(200 * time.Millisecond):
			}
		}
		if got == nil {
			t.Fatalf("%s: nothing of the topic subscribed live", tr)
		}
		if err := c.Unsubscribe(a); err != nil {
			t.Fatal(err)
		}
		closeClient(t, c, ev)
	}
}

// The personal topic: once the application sent to the user, the client keeps `user:<sub>`
// and subscribes it again itself on the next connection, from its cursor.
func TestIntegrationPersonalTopicKept(t *testing.T) {
	h := startHerald(t, "--auth-hs256-secret", testSecret)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	admin, done := newAdmin(t, h, "")
	defer done()
	for _, tr := range []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE} {
		user := "bob-" + string(tr)
		token := jwt(map[string]any{"sub": user, "exp": time.Now().Add(time.Hour).Unix(), "topics": []string{"own"}})
		c, ev := newClient(t, heraldpush.Options{URLs: []string{h.public}, Topics: []string{"own"}, Transports: []heraldpush.Transport{tr}, Token: token, Backoff: fast})
		ev.connected(10*time.Second, tr)
		sent, err := admin.SendUser(ctxT(t, 5*time.Second), user, "", "one")
		if err != nil {
			t.Fatal(err)
		}
		if m := ev.message(10 * time.Second); m.ID != sent.ID || !m.Server || m.Topic != "user:"+user {
			t.Fatalf("%s: %+v", tr, m)
		}
		// The application ends the connection (come back): the client reconnects.
		if _, err := admin.DisconnectUser(ctxT(t, 5*time.Second), user, heraldpush.Disconnect{Reason: "moved"}); err != nil {
			t.Fatal(err)
		}
		ev.next(10*time.Second, "the end of the connection", func(e heraldpush.Event) bool {
			s, ok := e.(*heraldpush.StateChange)
			return ok && s.State == heraldpush.StateDisconnected
		})
		// Published to the personal topic directly (not sent): it reaches the new connection
		// only if the client subscribed it again itself.
		r, err := admin.Publish(ctxT(t, 5*time.Second), "user:"+user, "two")
		if err != nil {
			t.Fatal(err)
		}
		if m := ev.message(10 * time.Second); m.ID != r.ID || !m.Server {
			t.Fatalf("%s: after the reconnect: %+v", tr, m)
		}
		closeClient(t, c, ev)
	}
}
