//! Target URLs: parsing, default paths, and the loopback-only safety check.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Serialize};
use url::Url;

/// A resolved server endpoint that clients connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Target {
    /// The URL as the user gave it.
    pub url: String,
    /// The socket address connected to.
    pub addr: SocketAddr,
    /// Value of the `Host` header (`host[:port]`).
    pub host_header: String,
    /// Request target: path plus query, e.g. `/v1/sse` or `/stream?x=1`.
    pub path_and_query: String,
}

impl Target {
    /// The `ws://` URL of this target, for the WebSocket handshake.
    pub(crate) fn ws_url(&self) -> String {
        format!("ws://{}{}", self.host_header, self.path_and_query)
    }

    /// Appends query parameters to the request target.
    pub(crate) fn with_query(&self, params: &[(&str, &str)]) -> String {
        let mut s = self.path_and_query.clone();
        for (k, v) in params {
            s.push(if s.contains('?') { '&' } else { '?' });
            s.push_str(&encode_component(k));
            s.push('=');
            s.push_str(&encode_component(v));
        }
        s
    }
}

/// Why a target URL was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TargetError {
    /// Not a URL.
    #[error("invalid URL `{0}`: {1}")]
    Parse(String, url::ParseError),
    /// A scheme other than http/ws.
    #[error("unsupported scheme in `{0}` (use http:// or ws://; TLS is not supported)")]
    Scheme(String),
    /// No host in the URL.
    #[error("URL `{0}` has no host")]
    NoHost(String),
    /// The host resolves to a non-loopback address and `--allow-non-loopback` was not given.
    #[error(
        "refusing non-loopback target `{0}` (only 127.0.0.0/8, ::1 and localhost are allowed without --allow-non-loopback)"
    )]
    NotLoopback(String),
    /// Name resolution failed.
    #[error("cannot resolve `{0}`: {1}")]
    Resolve(String, String),
}

/// Whether an address is loopback (127.0.0.0/8, ::1, or an IPv4-mapped loopback).
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Parses a target URL. An empty or `/` path is replaced by `default_path`.
///
/// Only loopback targets are accepted unless `allow_non_loopback`: `localhost` maps to
/// 127.0.0.1 without asking DNS, and other names are refused before being resolved.
pub(crate) fn parse_target(
    raw: &str,
    default_path: &str,
    allow_non_loopback: bool,
) -> Result<Target, TargetError> {
    let url = Url::parse(raw).map_err(|e| TargetError::Parse(raw.to_owned(), e))?;
    let default_port = match url.scheme() {
        "http" | "ws" => 80,
        _ => return Err(TargetError::Scheme(raw.to_owned())),
    };
    let port = url.port().unwrap_or(default_port);
    let host = url
        .host()
        .ok_or_else(|| TargetError::NoHost(raw.to_owned()))?;
    let ip: IpAddr = match host {
        url::Host::Ipv4(v4) => IpAddr::V4(v4),
        url::Host::Ipv6(v6) => IpAddr::V6(v6),
        url::Host::Domain(name) if name.eq_ignore_ascii_case("localhost") => {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        }
        url::Host::Domain(name) => {
            if !allow_non_loopback {
                return Err(TargetError::NotLoopback(raw.to_owned()));
            }
            (name, port)
                .to_socket_addrs()
                .map_err(|e| TargetError::Resolve(raw.to_owned(), e.to_string()))?
                .next()
                .ok_or_else(|| TargetError::Resolve(raw.to_owned(), "no address".into()))?
                .ip()
        }
    };
    if !allow_non_loopback && !is_loopback(ip) {
        return Err(TargetError::NotLoopback(raw.to_owned()));
    }
    let host_str = url.host_str().unwrap_or_default();
    let host_header = match url.port() {
        Some(p) => format!("{host_str}:{p}"),
        None => host_str.to_owned(),
    };
    let path = match url.path() {
        "" | "/" => default_path.to_owned(),
        p => p.to_owned(),
    };
    let path_and_query = match url.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    Ok(Target {
        url: raw.to_owned(),
        addr: SocketAddr::new(ip, port),
        host_header,
        path_and_query,
    })
}

/// Percent-encodes a query component (RFC 3986 unreserved characters pass through).
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.255.3.4".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.2".parse().unwrap()));
        assert!(!is_loopback("10.0.0.1".parse().unwrap()));
        assert!(!is_loopback("192.168.1.1".parse().unwrap()));
        assert!(!is_loopback("8.8.8.8".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!is_loopback("fe80::1".parse().unwrap()));
    }

    #[test]
    fn refuses_non_loopback_without_flag() {
        for url in [
            "http://10.1.2.3:8080",
            "http://192.168.0.10/",
            "ws://example.com/ws",
            "http://[2001:db8::1]:80",
        ] {
            assert!(
                matches!(
                    parse_target(url, "/v1/sse", false),
                    Err(TargetError::NotLoopback(_))
                ),
                "{url}"
            );
        }
        // with the flag, a literal address is accepted without any lookup
        let t = parse_target("http://10.1.2.3:8080", "/v1/sse", true).unwrap();
        assert_eq!(t.addr, "10.1.2.3:8080".parse().unwrap());
    }

    #[test]
    fn accepts_loopback_forms_and_fills_default_path() {
        let t = parse_target("http://127.0.0.1:8080", "/v1/sse", false).unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.host_header, "127.0.0.1:8080");
        assert_eq!(t.path_and_query, "/v1/sse");
        let t = parse_target("ws://localhost:9000/echo?x=1", "/v1/ws", false).unwrap();
        assert_eq!(t.addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(t.path_and_query, "/echo?x=1");
        assert_eq!(t.ws_url(), "ws://localhost:9000/echo?x=1");
        let t = parse_target("http://[::1]:8080/", "/v1/ws", false).unwrap();
        assert_eq!(t.addr, "[::1]:8080".parse().unwrap());
        assert_eq!(t.host_header, "[::1]:8080");
    }

    #[test]
    fn rejects_tls_and_garbage() {
        assert!(matches!(
            parse_target("https://127.0.0.1", "/", false),
            Err(TargetError::Scheme(_))
        ));
        assert!(matches!(
            parse_target("not a url", "/", false),
            Err(TargetError::Parse(..))
        ));
    }

    #[test]
    fn query_building_encodes() {
        let t = parse_target("http://127.0.0.1:1/v1/sse", "/", false).unwrap();
        assert_eq!(
            t.with_query(&[("topic", "a"), ("topic", "b c")]),
            "/v1/sse?topic=a&topic=b%20c"
        );
        let t = parse_target("http://127.0.0.1:1/s?k=v", "/", false).unwrap();
        assert_eq!(t.with_query(&[("topic", "x:y")]), "/s?k=v&topic=x%3Ay");
    }
}
