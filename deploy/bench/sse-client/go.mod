module herald.dev/bench/sse-client

go 1.21
