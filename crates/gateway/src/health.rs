//! `herald health`: asks a running gateway's admin listener whether it is ready, for container
//! health checks and scripts. Exit status 0 when `/readyz` answers 200; 1 with the reason
//! (refused, timed out, 503 while draining, ...) otherwise; 64 for a bad address. Plain HTTP
//! over `std::net`, so the image needs no curl and the check needs no runtime.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::config::Cli;
pub(crate) use crate::config::{Command, HealthArgs};

/// `EX_USAGE` from sysexits.h.
const EX_USAGE: u8 = 64;
/// Most bytes of an answer read (status line, headers and a short body).
const MAX_ANSWER: usize = 16 * 1024;

/// Where to ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `host:port` as given (also the `Host` header).
    pub authority: String,
    /// Request path, `/readyz` unless given.
    pub path: String,
}

impl Target {
    /// Parses `http://host:port[/path]` or `host:port[/path]`.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(format!(
                "{url}: the admin listener speaks plain HTTP; use http://"
            ));
        } else if url.contains("://") {
            return Err(format!("{url}: only http:// URLs are supported"));
        } else {
            url
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/readyz"),
        };
        let port = authority
            .rsplit_once(':')
            .map(|(_, p)| p)
            .filter(|p| !p.contains(']'));
        if authority.is_empty() || port.is_none_or(|p| p.parse::<u16>().is_err()) {
            return Err(format!("{url}: expected HOST:PORT, e.g. 127.0.0.1:9090"));
        }
        if path
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(format!("{url}: the path may not contain spaces"));
        }
        Ok(Self {
            authority: authority.to_string(),
            path: if path == "/" { "/readyz" } else { path }.to_string(),
        })
    }

    /// The admin listener a local gateway with `admin_listen` answers on: an unspecified
    /// address (0.0.0.0, ::) is asked on loopback.
    pub(crate) fn local(admin_listen: SocketAddr) -> Self {
        let mut addr = admin_listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        Self {
            authority: addr.to_string(),
            path: "/readyz".into(),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

/// Asks `target` once; `Ok` with the answer's first body line when it is 200, else the
/// reason.
pub(crate) fn check(target: &Target, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("{target}: no answer within {timeout:?}"))
    };
    let addrs: Vec<SocketAddr> = target
        .authority
        .to_socket_addrs()
        .map_err(|e| format!("{target}: cannot resolve {}: {e}", target.authority))?
        .collect();
    let mut last_error = format!("{target}: {} resolves to no address", target.authority);
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_error = format!("{target}: cannot connect to {addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or(last_error)?;
    let io = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            format!("{target}: no answer within {timeout:?}")
        } else {
            format!("{target}: {e}")
        }
    };
    stream.set_write_timeout(Some(left()?)).map_err(io)?;
    write!(
        stream,
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: herald-health\r\nConnection: close\r\n\r\n",
        target.path, target.authority
    )
    .map_err(io)?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while answer.len() < MAX_ANSWER {
        stream.set_read_timeout(Some(left()?)).map_err(io)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|s| s.get(2..5))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("{target}: not an HTTP answer: {status_line:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim())
        .unwrap_or_default();
    let body: String = body
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    if status == 200 {
        Ok(body)
    } else {
        Err(format!("{target} answered {status}: {body}"))
    }
}

/// Runs a subcommand of `herald`; `cli` gives the configuration its defaults come from.
pub fn main(cli: &Cli, command: &Command) -> ExitCode {
    match command {
        Command::Health(args) => health(cli, args),
    }
}

fn health(cli: &Cli, args: &HealthArgs) -> ExitCode {
    let target = match &args.admin {
        Some(url) => Target::parse(url),
        None => cli
            .load()
            .map(|config| Target::local(config.admin_listen))
            .map_err(|e| format!("{e:#}")),
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            eprintln!("herald health: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    match check(&target, args.timeout) {
        Ok(body) => {
            println!("herald health: {target} answered 200: {body}");
            ExitCode::SUCCESS
        }
        Err(reason) => {
            eprintln!("herald health: not ready: {reason}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_and_without_scheme_and_path() {
        let t = Target::parse("http://127.0.0.1:9090").unwrap();
        assert_eq!(t.to_string(), "http://127.0.0.1:9090/readyz");
        let t = Target::parse("localhost:9/healthz").unwrap();
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("localhost:9", "/healthz")
        );
        let t = Target::parse("http://[::1]:9090/").unwrap();
        assert_eq!(t.to_string(), "http://[::1]:9090/readyz");
        for bad in [
            "https://a:1",
            "ftp://a:1",
            "",
            "a",
            "a:",
            "a:99999",
            "[::1]",
            "a:1/x y",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn an_unspecified_listen_address_is_asked_on_loopback() {
        let t = Target::local("0.0.0.0:9090".parse().unwrap());
        assert_eq!(t.to_string(), "http://127.0.0.1:9090/readyz");
        let t = Target::local("[::]:9091".parse().unwrap());
        assert_eq!(t.to_string(), "http://[::1]:9091/readyz");
        let t = Target::local("10.0.0.5:9090".parse().unwrap());
        assert_eq!(t.to_string(), "http://10.0.0.5:9090/readyz");
    }

    #[test]
    fn a_closed_port_is_reported_not_ready() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let target = Target::parse(&format!("127.0.0.1:{port}")).unwrap();
        let err = check(&target, Duration::from_secs(2)).unwrap_err();
        assert!(err.contains("cannot connect"), "{err}");
    }

    #[test]
    fn a_silent_server_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = Target::parse(&listener.local_addr().unwrap().to_string()).unwrap();
        let started = Instant::now();
        let err = check(&target, Duration::from_millis(300)).unwrap_err();
        assert!(err.contains("no answer within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
