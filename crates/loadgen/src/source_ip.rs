//! Parsing of `--source-ips`: the local addresses client sockets bind to.
//!
//! Every source address has its own ephemeral port range (about 28,000 ports with Linux
//! defaults), so spreading connections over 127.0.0.1–127.0.0.x lets one machine open far
//! more than 28,000 connections to one server address.

use std::net::{IpAddr, Ipv4Addr};

/// Largest number of source addresses accepted (a /16 worth).
pub(crate) const MAX_SOURCE_IPS: u32 = 65_536;

/// An error in a `--source-ips` value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SourceIpError {
    /// The value is neither a count, an address, a range nor a list.
    #[error(
        "cannot parse source address `{0}` (expected a count like 20, an address, a range like 127.0.0.1-127.0.0.20, or a comma-separated list)"
    )]
    Parse(String),
    /// A range whose end is before its start.
    #[error("source address range `{0}` ends before it starts")]
    Reversed(String),
    /// Too many addresses.
    #[error("too many source addresses (at most {MAX_SOURCE_IPS})")]
    TooMany,
    /// A count of zero.
    #[error("source address count must be at least 1")]
    Zero,
}

/// Parses `N` (N addresses from 127.0.0.1), `A-B` (inclusive IPv4 range), a single address,
/// or a comma-separated list of those.
pub(crate) fn parse_source_ips(spec: &str) -> Result<Vec<IpAddr>, SourceIpError> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Ok(n) = part.parse::<u32>() {
            if n == 0 {
                return Err(SourceIpError::Zero);
            }
            if n > MAX_SOURCE_IPS {
                return Err(SourceIpError::TooMany);
            }
            out.extend(loopback_block(n));
        } else if let Some((a, b)) = part.split_once('-') {
            let a: Ipv4Addr = a
                .trim()
                .parse()
                .map_err(|_| SourceIpError::Parse(part.to_owned()))?;
            let b: Ipv4Addr = b
                .trim()
                .parse()
                .map_err(|_| SourceIpError::Parse(part.to_owned()))?;
            let (a, b) = (u32::from(a), u32::from(b));
            if b < a {
                return Err(SourceIpError::Reversed(part.to_owned()));
            }
            if b - a >= MAX_SOURCE_IPS {
                return Err(SourceIpError::TooMany);
            }
            out.extend((a..=b).map(|v| IpAddr::V4(Ipv4Addr::from(v))));
        } else {
            let ip: IpAddr = part
                .parse()
                .map_err(|_| SourceIpError::Parse(part.to_owned()))?;
            out.push(ip);
        }
        if out.len() > MAX_SOURCE_IPS as usize {
            return Err(SourceIpError::TooMany);
        }
    }
    if out.is_empty() {
        return Err(SourceIpError::Parse(spec.to_owned()));
    }
    Ok(out)
}

/// `n` consecutive loopback addresses starting at 127.0.0.1.
pub(crate) fn loopback_block(n: u32) -> Vec<IpAddr> {
    let start = u32::from(Ipv4Addr::new(127, 0, 0, 1));
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::from(start + i)))
        .collect()
}

/// How many loopback source addresses to use by default for `sockets` client sockets:
/// one per 20,000 sockets (well under the ~28,000 ephemeral ports of one address), at least 1.
pub(crate) fn default_count(sockets: u64) -> u32 {
    (sockets.div_ceil(20_000)).clamp(1, 250) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn count_means_loopback_block() {
        let ips = parse_source_ips("3").unwrap();
        assert_eq!(ips, vec![v4("127.0.0.1"), v4("127.0.0.2"), v4("127.0.0.3")]);
    }

    #[test]
    fn range_is_inclusive_and_crosses_octets() {
        let ips = parse_source_ips("127.0.0.254-127.0.1.1").unwrap();
        assert_eq!(
            ips,
            vec![
                v4("127.0.0.254"),
                v4("127.0.0.255"),
                v4("127.0.1.0"),
                v4("127.0.1.1")
            ]
        );
        assert_eq!(parse_source_ips("127.0.0.1-127.0.0.20").unwrap().len(), 20);
    }

    #[test]
    fn lists_and_single_addresses() {
        let ips = parse_source_ips("127.0.0.5, ::1,127.0.0.7-127.0.0.8").unwrap();
        assert_eq!(
            ips,
            vec![v4("127.0.0.5"), v4("::1"), v4("127.0.0.7"), v4("127.0.0.8")]
        );
    }

    #[test]
    fn rejects_bad_values() {
        assert_eq!(parse_source_ips("0"), Err(SourceIpError::Zero));
        assert!(matches!(
            parse_source_ips("127.0.0.9-127.0.0.1"),
            Err(SourceIpError::Reversed(_))
        ));
        assert!(matches!(
            parse_source_ips("banana"),
            Err(SourceIpError::Parse(_))
        ));
        assert!(matches!(parse_source_ips(""), Err(SourceIpError::Parse(_))));
        assert_eq!(parse_source_ips("1000000"), Err(SourceIpError::TooMany));
    }

    #[test]
    fn default_count_scales() {
        assert_eq!(default_count(100), 1);
        assert_eq!(default_count(20_000), 1);
        assert_eq!(default_count(120_000), 6);
    }
}
