package heraldpush_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	heraldpush "github.com/heraldpush/heraldpush-go"
)

// The README's example: subscribe, read messages until the client is closed.
func ExampleNew() {
	c, err := heraldpush.New(heraldpush.Options{URLs: []string{"https://push.example.com"}, Topics: []string{"news", "orders.*"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for ev := range c.Events() {
		switch ev := ev.(type) {
		case *heraldpush.Message:
			fmt.Println(ev.Topic, ev.ID, string(ev.Data))
		case *heraldpush.Lost:
			log.Printf("messages of %s were lost (%s): reload its state", ev.Topic, ev.Reason)
		case *heraldpush.StateChange:
			log.Printf("%s %s", ev.State, ev.Transport)
		case *heraldpush.ErrorEvent:
			log.Print(ev.Err)
		}
	}
}

// Several nodes, a token that is refreshed, cursors saved from an earlier run.
func ExampleOptions() {
	saved := map[string]string{"news": "9f86d081884c7d65-41"}
	c, err := heraldpush.New(heraldpush.Options{
		URLs:    []string{"https://push-a.example.com", "https://push-b.example.com"},
		Topics:  []string{"news"},
		Cursors: saved,
		TokenFunc: func(ctx context.Context) (string, error) {
			return "a JWT from your backend", nil
		},
		Transports: []heraldpush.Transport{heraldpush.WebSocket, heraldpush.SSE, heraldpush.LongPoll},
		Backoff:    heraldpush.Backoff{Min: time.Second, Max: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, "news", map[string]any{"text": "hi"}); err != nil {
		var refused *heraldpush.Error
		if errors.As(err, &refused) {
			log.Printf("refused: %s (%s)", refused.Code, refused.Reason)
		}
	}
}
