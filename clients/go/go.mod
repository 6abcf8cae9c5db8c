module github.com/heraldpush/heraldpush-go

go 1.23

require (
	github.com/coder/websocket v1.8.15
	github.com/vmihailenco/msgpack/v5 v5.4.1
	go.uber.org/goleak v1.3.0
)

require github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
