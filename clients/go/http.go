package heraldpush

// What the HTTP transports, history and publishing share: requests with the token, the
// gateway's JSON refusals, bounded reads.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// errCut: the connection broke under a request, and net/http was about to send it again on
// a new one (it does so by itself for a GET on a reused connection). The client reports the
// cut and reconnects itself instead, so that a cut is seen, as on every other client.
var errCut = errors.New("heraldpush: the connection was cut")

// noSilentRetry makes ctx's request fail with errCut (through cancel) rather than be sent
// again on a second connection.
func noSilentRetry(ctx context.Context, cancel context.CancelCauseFunc) context.Context {
	conns := 0
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		conns++
		if conns > 1 {
			cancel(errCut)
		}
	}})
}

func decodeSegment(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// endpoint is base with path and query.
func endpoint(base *url.URL, path string, q url.Values) string {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	if q != nil {
		u.RawQuery = q.Encode()
	} else {
		u.RawQuery = ""
	}
	return u.String()
}

// readLimited reads at most limit bytes of r; more is an error.
func readLimited(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("heraldpush: an answer over %d bytes", limit)
	}
	return b, nil
}

// refusal reads an error answer: an *Error, in an *endError that is fatal for the gateway's
// 4xx other than 408 and 429, with the server's retry-after.
func refusal(res *http.Response, what string) *endError {
	b, _ := readLimited(res.Body, 64<<10)
	var body errorBody
	e := &Error{Status: res.StatusCode, Code: "http_" + strconv.Itoa(res.StatusCode), Reason: what + " answered " + res.Status}
	herald := json.Unmarshal(b, &body) == nil && body.Code != ""
	if herald {
		e.Code, e.Reason = body.Code, body.Reason
	}
	end := &endError{err: fmt.Errorf("%s: %w", what, e)}
	if s, err := strconv.Atoi(res.Header.Get("retry-after")); err == nil && s > 0 {
		end.retry = time.Duration(s) * time.Second
	}
	// The gateway's own refusal (its JSON error) is final; an answer without one comes from
	// something in between (a proxy that does not pass WebSocket upgrades or streams): a
	// failure of the transport, worth the next one.
	if herald && res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != 408 && res.StatusCode != 429 {
		end.fatal = true
	}
	return end
}

// publishHTTP publishes with POST /v1/publish (a token or an API key).
func publishHTTP(ctx context.Context, hc *http.Client, base *url.URL, token, apiKey, topic, event string, data json.RawMessage, limit int) (PublishResult, error) {
	body, err := json.Marshal(struct {
		Topic string          `json:"topic"`
		Data  json.RawMessage `json:"data"`
		Event string          `json:"event,omitempty"`
	}{topic, data, event})
	if err != nil {
		return PublishResult{}, fmt.Errorf("heraldpush: publish: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint(base, "/v1/publish", nil), bytes.NewReader(body))
	if err != nil {
		return PublishResult{}, fmt.Errorf("heraldpush: publish: %w", err)
	}
	req.Header.Set("content-type", "application/json")
	if token != "" {
		req.Header.Set("authorization", "Bearer "+token)
	}
	if apiKey != "" {
		req.Header.Set("x-api-key", apiKey)
	}
	var out PublishResult
	if err := doJSON(hc, req, "publish", limit, &out); err != nil {
		return PublishResult{}, err
	}
	return out, nil
}

// doJSON sends req and reads a JSON answer into out; a refusal is an *Error.
func doJSON(hc *http.Client, req *http.Request, what string, limit int, out any) error {
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("heraldpush: %s: %w", what, err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		return refusal(res, what).err
	}
	b, err := readLimited(res.Body, limit)
	if err != nil {
		return fmt.Errorf("heraldpush: %s: %w", what, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("heraldpush: %s: %w: %v", what, errMalformed, err)
	}
	return nil
}

// historyAnswer is the body of GET /v1/topics/{topic}/history.
type historyAnswer struct {
	Topic    string            `json:"topic"`
	Messages []json.RawMessage `json:"messages"`
	Lost     *string           `json:"lost"`
	More     bool              `json:"more"`
	Next     string            `json:"next"`
}

// history reads a page of history (public listener with a token, or admin with an API key).
func history(ctx context.Context, hc *http.Client, base *url.URL, token, apiKey, topic string, o HistoryOptions, limit int) (*HistoryPage, error) {
	if !ValidTopic(topic) {
		return nil, fmt.Errorf("heraldpush: bad topic %q", topic)
	}
	q := url.Values{}
	if o.Since != "" {
		q.Set("since", o.Since)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint(base, "/v1/topics/"+topic+"/history", q), nil)
	if err != nil {
		return nil, fmt.Errorf("heraldpush: history: %w", err)
	}
	if token != "" {
		req.Header.Set("authorization", "Bearer "+token)
	}
	if apiKey != "" {
		req.Header.Set("x-api-key", apiKey)
	}
	var a historyAnswer
	if err := doJSON(hc, req, "history", limit, &a); err != nil {
		return nil, err
	}
	page := &HistoryPage{Topic: a.Topic, More: a.More, Next: a.Next}
	if a.Lost != nil {
		page.Lost = *a.Lost
	}
	for _, raw := range a.Messages {
		f, err := decodeJSONFrame(raw)
		if err != nil {
			return nil, fmt.Errorf("heraldpush: history: %w", err)
		}
		page.Messages = append(page.Messages, Message{Topic: f.Topic, ID: f.ID, Event: f.Event, Data: f.Data})
	}
	return page, nil
}
