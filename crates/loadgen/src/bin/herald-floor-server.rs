//! `herald-floor-server`: the raw floor as a server, for the same run as a fan-out benchmark.
//!
//! The smallest SSE server that can take part in `herald-loadgen sse`: it accepts
//! `GET /v1/sse?topic=...` on the public address, answers the response head and keeps the
//! socket; a `POST /v1/publish` (`{"topic":..,"data":..}`) on the admin address writes one
//! `data:` frame to every socket of that topic, one blocking `write_all` each, from the thread
//! that read the request. No runtime, no channel, no per-connection task, no timer.
//!
//! It is the same floor for `herald-loadgen ws`: a `GET /v1/ws` upgrade is answered, the
//! client's one `subscribe` frame read and acknowledged as Herald does, and each publish then
//! writes the socket one unmasked text frame holding Herald's `message` JSON — so that a
//! WebSocket run compares against bare writes of the same bytes read by the same client. No
//! pings, nothing read after the subscription.
//!
//! Run the loadgen against it exactly as against Herald (same `--conns`, `--publish-rate`,
//! `--server-pid`); its CPU-µs per delivery is what bare socket writes cost under the same
//! receivers, and Herald's figure divided by it is Herald's overhead. Loopback only.
//!
//! ```text
//! herald-floor-server --listen 127.0.0.1:40000 --admin-listen 127.0.0.1:40100
//! ```

use std::collections::HashMap;
use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};

/// Largest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// Largest publish body read.
const MAX_BODY: usize = 1 << 20;

/// Largest client frame read (the `subscribe`).
const MAX_FRAME: usize = 64 * 1024;

/// A subscriber's socket and what it reads.
struct Subscriber {
    socket: TcpStream,
    websocket: bool,
}

type Subscribers = Arc<Mutex<HashMap<String, Vec<Subscriber>>>>;

/// A listening socket on `addr` with a `listen(2)` backlog of 4096, as Herald's default
/// `limits.listen_backlog`: std's `bind` fixes it at 128, and 15,000 clients dialling at once
/// overflowed it (their SYNs dropped and sent again a second later, some timing out), so the
/// floor's runs, not Herald's, lost connections.
fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, setsockopt, socket, sockopt,
    };
    use std::os::fd::AsRawFd;
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    nix::sys::socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    nix::sys::socket::listen(&fd, Backlog::new(4096)?)?;
    Ok(TcpListener::from(fd))
}

fn main() -> anyhow::Result<()> {
    let mut listen: SocketAddr = "127.0.0.1:40000".parse()?;
    let mut admin: SocketAddr = "127.0.0.1:40100".parse()?;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().context("a flag needs a value");
        match arg.as_str() {
            "--listen" => listen = value()?.parse().context("--listen")?,
            "--admin-listen" => admin = value()?.parse().context("--admin-listen")?,
            "-h" | "--help" => {
                println!(
                    "herald-floor-server [--listen ADDR] [--admin-listen ADDR]\n\
                     Bare SSE and WebSocket writer: GET /v1/sse?topic=T or a GET /v1/ws upgrade on --listen,\n\
                     POST /v1/publish on --admin-listen."
                );
                return Ok(());
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    for addr in [listen, admin] {
        if !addr.ip().is_loopback() {
            bail!("{addr} is not a loopback address");
        }
    }
    let subscribers: Subscribers = Arc::default();
    let public = bind(listen).with_context(|| format!("bind {listen}"))?;
    let admin = bind(admin).with_context(|| format!("bind {admin}"))?;
    eprintln!(
        "herald-floor-server: SSE on {}, publish on {}",
        public.local_addr()?,
        admin.local_addr()?
    );
    let subs = subscribers.clone();
    std::thread::spawn(move || {
        for conn in admin.incoming().flatten() {
            let subs = subs.clone();
            std::thread::spawn(move || {
                let _ = serve_publisher(conn, &subs);
            });
        }
    });
    for conn in public.incoming() {
        match conn {
            Ok(conn) => {
                if let Err(e) = accept_subscriber(conn, &subscribers) {
                    eprintln!("herald-floor-server: subscriber refused: {e}");
                }
            }
            Err(e) => {
                eprintln!("herald-floor-server: accept: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    Ok(())
}

/// A request head: its request line, `content-length` and `sec-websocket-key`.
struct Head {
    line: String,
    length: usize,
    websocket_key: Option<String>,
}

/// Reads a request head (blocking, bounded).
fn read_head(reader: &mut BufReader<&TcpStream>) -> io::Result<Option<Head>> {
    let mut first = String::new();
    if reader.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut length = 0;
    let mut websocket_key = None;
    let mut total = first.len();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line)?;
        total += n;
        if n == 0 || total > MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "bad head"));
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("sec-websocket-key") {
                websocket_key = Some(value.trim().to_owned());
            }
        }
    }
    Ok(Some(Head {
        line: first.trim_end().to_owned(),
        length,
        websocket_key,
    }))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads one client frame (masked, unfragmented, at most [`MAX_FRAME`]): its payload.
fn read_client_frame(reader: &mut impl io::Read) -> io::Result<Vec<u8>> {
    let mut head = [0u8; 2];
    reader.read_exact(&mut head)?;
    if head[0] & 0x80 == 0 || head[1] & 0x80 == 0 {
        return Err(invalid("expected one whole, masked frame"));
    }
    let length = match head[1] & 0x7f {
        126 => {
            let mut n = [0u8; 2];
            reader.read_exact(&mut n)?;
            usize::from(u16::from_be_bytes(n))
        }
        127 => return Err(invalid("frame too large")),
        n => usize::from(n),
    };
    if length > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    let mut mask = [0u8; 4];
    reader.read_exact(&mut mask)?;
    let mut payload = vec![0; length];
    reader.read_exact(&mut payload)?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok(payload)
}

/// `text` as one unmasked server text frame.
fn text_frame(text: &str) -> Vec<u8> {
    let mut frame = Vec::with_capacity(text.len() + 10);
    frame.push(0x81);
    match text.len() {
        n @ 0..=125 => frame.push(n as u8),
        n @ 126..=0xffff => {
            frame.push(126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(text.as_bytes());
    frame
}

/// Answers a WebSocket upgrade and reads the client's `subscribe`: the topics it named.
fn accept_websocket(
    conn: &TcpStream,
    reader: &mut BufReader<&TcpStream>,
    key: &str,
) -> io::Result<Vec<String>> {
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut writer = conn;
    writer.write_all(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: {accept}\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let subscribe: serde_json::Value = serde_json::from_slice(&read_client_frame(reader)?)
        .map_err(|_| invalid("the subscribe frame is not JSON"))?;
    let topics: Vec<String> = subscribe["topics"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if subscribe["type"] != "subscribe" || topics.is_empty() {
        return Err(invalid("expected a subscribe frame"));
    }
    let ack = serde_json::json!({ "type": "subscribed", "topics": topics });
    writer.write_all(&text_frame(&ack.to_string()))?;
    Ok(topics)
}

fn accept_subscriber(conn: TcpStream, subscribers: &Subscribers) -> io::Result<()> {
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(&conn);
    let head = read_head(&mut reader)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed"))?;
    let target = head.line.split(' ').nth(1).unwrap_or("");
    if let (true, Some(key)) = (target.starts_with("/v1/ws"), &head.websocket_key) {
        let topics = accept_websocket(&conn, &mut reader, key)?;
        let mut subscribers = subscribers.lock().expect("subscriber list");
        for topic in topics {
            let socket = conn.try_clone()?;
            subscribers.entry(topic).or_default().push(Subscriber {
                socket,
                websocket: true,
            });
        }
        return Ok(());
    }
    let topic = target
        .split_once('?')
        .and_then(|(_, q)| q.split('&').find_map(|kv| kv.strip_prefix("topic=")))
        .map(str::to_owned);
    let mut conn = conn;
    let Some(topic) = topic.filter(|_| target.starts_with("/v1/sse")) else {
        conn.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )?;
        return Ok(());
    };
    conn.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )?;
    subscribers
        .lock()
        .expect("subscriber list")
        .entry(topic)
        .or_default()
        .push(Subscriber {
            socket: conn,
            websocket: false,
        });
    Ok(())
}

fn serve_publisher(conn: TcpStream, subscribers: &Subscribers) -> io::Result<()> {
    let mut reader = BufReader::new(&conn);
    let mut seq: u64 = 0;
    while let Some(Head { length, .. }) = read_head(&mut reader)? {
        if length > MAX_BODY {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let answer = match publish(&body, subscribers, &mut seq) {
            Ok(id) => format!("{{\"id\":\"{id}\"}}"),
            Err(e) => format!("{{\"code\":\"bad_json\",\"reason\":\"{e}\"}}"),
        };
        (&conn).write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                answer.len()
            )
            .as_bytes(),
        )?;
    }
    Ok(())
}

/// Writes one frame to every subscriber of the message's topic; drops the ones that fail.
fn publish(body: &[u8], subscribers: &Subscribers, seq: &mut u64) -> anyhow::Result<String> {
    let request: serde_json::Value = serde_json::from_slice(body)?;
    let topic = request["topic"].as_str().context("no topic")?;
    let data = serde_json::to_string(&request["data"])?;
    *seq += 1;
    let id = format!("{topic}={seq}");
    let frame = format!("id: {id}\ndata: {data}\n\n");
    // Herald's `message` frame, `topic` JSON-escaped as Herald writes it.
    let message = format!(
        r#"{{"type":"message","topic":{},"id":"{id}","data":{data}}}"#,
        serde_json::to_string(topic)?
    );
    let ws_frame = text_frame(&message);
    let mut subscribers = subscribers.lock().expect("subscriber list");
    if let Some(sockets) = subscribers.get_mut(topic) {
        sockets.retain_mut(|s| {
            let bytes = if s.websocket {
                &ws_frame[..]
            } else {
                frame.as_bytes()
            };
            s.socket.write_all(bytes).is_ok()
        });
    }
    Ok(id)
}
