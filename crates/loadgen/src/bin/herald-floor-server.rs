//! `herald-floor-server`: the raw floor as a server, for the same run as a fan-out benchmark.
//!
//! The smallest SSE server that can take part in `herald-loadgen sse`: it accepts
//! `GET /v1/sse?topic=...` on the public address, answers the response head and keeps the
//! socket; a `POST /v1/publish` (`{"topic":..,"data":..}`) on the admin address writes one
//! `data:` frame to every socket of that topic, one blocking `write_all` each, from the thread
//! that read the request. No runtime, no channel, no per-connection task, no timer.
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

type Subscribers = Arc<Mutex<HashMap<String, Vec<TcpStream>>>>;

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
                     Bare SSE writer: GET /v1/sse?topic=T on --listen, POST /v1/publish on --admin-listen."
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
    let public = TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
    let admin = TcpListener::bind(admin).with_context(|| format!("bind {admin}"))?;
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

/// Reads a request head (blocking, bounded); returns the request line and the
/// `content-length`.
fn read_head(reader: &mut BufReader<&TcpStream>) -> io::Result<Option<(String, usize)>> {
    let mut first = String::new();
    if reader.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut length = 0;
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
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    Ok(Some((first.trim_end().to_owned(), length)))
}

fn accept_subscriber(conn: TcpStream, subscribers: &Subscribers) -> io::Result<()> {
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(10)))?;
    let (line, _) = read_head(&mut BufReader::new(&conn))?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed"))?;
    let target = line.split(' ').nth(1).unwrap_or("");
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
        .push(conn);
    Ok(())
}

fn serve_publisher(conn: TcpStream, subscribers: &Subscribers) -> io::Result<()> {
    let mut reader = BufReader::new(&conn);
    let mut seq: u64 = 0;
    while let Some((_line, length)) = read_head(&mut reader)? {
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
    let mut subscribers = subscribers.lock().expect("subscriber list");
    if let Some(sockets) = subscribers.get_mut(topic) {
        sockets.retain_mut(|s| s.write_all(frame.as_bytes()).is_ok());
    }
    Ok(id)
}
