package heraldpush

import (
	"math/rand/v2"
	"time"
)

// Backoff bounds the reconnect delays: exponential with jitter. The n-th failure in a row
// waits a random time in [bound/2, bound], bound = min(Max, Min·2^n), so that the clients of
// a drained node do not come back all at once.
type Backoff struct {
	Min time.Duration // bound of the first retry (default 500 ms)
	Max time.Duration // largest bound (default 30 s)
}

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = 500 * time.Millisecond
	}
	if b.Max < b.Min {
		b.Max = 30 * time.Second
		if b.Max < b.Min {
			b.Max = b.Min
		}
	}
	return b
}

// Delay is the wait after `attempt` failures in a row; rnd gives a number in [0, 1).
func (b Backoff) Delay(attempt int, rnd func() float64) time.Duration {
	b = b.withDefaults()
	bound := b.Max
	if attempt < 30 {
		if d := b.Min << uint(max(attempt, 0)); d > 0 && d < b.Max {
			bound = d
		}
	}
	half := bound / 2
	return half + time.Duration(rnd()*float64(bound-half))
}

// reconnects decides where and when the next attempt goes. An attempt that fails (cannot
// connect, or is cut before it was stable) moves on to the next URL, and once every URL failed
// on a transport, to the next transport; the delays grow with the failures in a row.
type reconnects struct {
	urls, transports int
	backoff          Backoff
	rnd              func() float64
	transport, url   int // indexes for the next attempt
	failsHere        int // failures on this transport since it was chosen
	failures         int // failures in a row: the backoff's exponent
}

func newReconnects(urls, transports int, b Backoff, rnd func() float64) *reconnects {
	if rnd == nil {
		rnd = rand.Float64
	}
	return &reconnects{urls: urls, transports: transports, backoff: b.withDefaults(), rnd: rnd}
}

// failedBeforeConnecting: no attempt was made (the token could not be had).
func (r *reconnects) failedBeforeConnecting() time.Duration {
	d := r.backoff.Delay(r.failures, r.rnd)
	r.failures++
	return d
}

// upgraded: transport ti, preferred to the one in use, opened and took over.
func (r *reconnects) upgraded(ti int) {
	r.transport = ti
	r.failsHere = 0
}

// ended: a connection of transport ti ended. stable when it had been open long enough to
// count as a success; shutdown when the node drains (not the transport's fault); retry is the
// server's hint (0: none).
func (r *reconnects) ended(ti int, stable, shutdown bool, retry time.Duration) time.Duration {
	if shutdown {
		// The node drains: the next node, after its hint (already spread per client).
		r.url = (r.url + 1) % r.urls
		if retry > 0 {
			return retry
		}
		return r.backoff.Delay(1, r.rnd)
	}
	if stable {
		r.failures = 0
		r.failsHere = 0
		if retry > 0 {
			return retry
		}
		return r.backoff.Delay(0, r.rnd)
	}
	r.url = (r.url + 1) % r.urls
	r.failsHere++
	if r.failsHere >= r.urls && ti == r.transport {
		r.failsHere = 0
		r.transport = (r.transport + 1) % r.transports
	}
	d := r.backoff.Delay(r.failures, r.rnd)
	r.failures++
	return max(d, retry)
}
