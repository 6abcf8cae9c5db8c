//! `hostile`: attacker loops throwing malformed, oversized, slow and forged requests at a
//! server while well-behaved subscribers (the `sse` machinery) run alongside, to show that
//! hostile clients neither take the server down, nor grow its memory, nor hurt the others.
//!
//! - [`attack`]: the attacks by name; [`catalogue`]: their variants and the answers each
//!   expects ([`exp`]);
//! - [`raw`]: raw HTTP and hand-made WebSocket frames; [`codec`]: permessage-deflate and
//!   MessagePack for them; [`http2`]: HTTP/2 over TLS (the `h2` crate, raw control frames);
//! - [`engine`]: the attacker loops, the health checker and the counts;
//! - [`memory`]: RSS over the attack phase; [`report`]: the report section and its verdict.

pub(crate) mod attack;
pub(crate) mod catalogue;
pub(crate) mod codec;
pub(crate) mod engine;
pub(crate) mod exp;
pub(crate) mod http2;
pub(crate) mod jwt;
pub(crate) mod memory;
pub(crate) mod outcome;
pub(crate) mod raw;
pub(crate) mod report;

use std::net::IpAddr;
use std::time::Duration;

use crate::target::Target;
use attack::{Attack, Gates};

/// A validated hostile configuration.
#[derive(Debug, Clone)]
pub(crate) struct HostileConfig {
    /// Public listeners attacked (round-robin).
    pub targets: Vec<Target>,
    /// The admin listener, for the attacks that go there (`--admin-url`).
    pub admin: Option<Target>,
    /// Attacker loops.
    pub conns: usize,
    /// The catalogue of this run, in round-robin order.
    pub attacks: Vec<Attack>,
    /// Time bound of one attack (connect to outcome).
    pub attack_timeout: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Time bound of one slowloris attack.
    pub slowloris_max: Duration,
    /// Slowloris: time between trickled bytes.
    pub slowloris_every: Duration,
    /// Most slow attacks in progress at once.
    pub max_slow: usize,
    /// Source addresses of attacker sockets (round-robin; empty: no bind).
    pub source_ips: Vec<IpAddr>,
    /// An origin the server refuses (`auth.allowed_origins` set), for `ws_bad_origin`.
    pub origin_forbidden: Option<String>,
    /// The server's HS256 secret when known (else a made-up one).
    pub jwt_secret: Vec<u8>,
    /// The server's `ws.max_message_size`.
    pub max_ws_message: usize,
    /// Size of the huge `Last-Event-ID`.
    pub huge_bytes: usize,
    /// Pings per flood.
    pub ping_flood: usize,
    /// Health URL (admin listener), if any.
    pub health: Option<Target>,
    /// Time between health checks.
    pub health_every: Duration,
    /// Time bound of one health check.
    pub health_timeout: Duration,
    /// Warm-up excluded from the memory start figure.
    pub warmup: Duration,
    /// Flag RSS growth (first to last window) above this, KiB.
    pub max_rss_growth_kb: Option<u64>,
    /// Time between the good client's new-pattern probes (when `pattern_lockout` runs), and
    /// between the honest HTTP/2 requests (when an HTTP/2 attack runs).
    pub probe_every: Duration,
    /// The public listener over TLS, for the HTTP/2 attacks (`--h2-url`).
    pub h2: Option<http2::H2Target>,
}

/// Parses `--attacks`: `all`, `default`, or a comma-separated list of names; a leading `-`
/// removes a name (`default,-slowloris`). `default` and `all` leave out the attacks whose
/// gate is closed; naming one of those is an error that names its flag.
pub(crate) fn parse_attacks(spec: &str, gates: Gates) -> Result<Vec<Attack>, String> {
    let mut out: Vec<Attack> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (remove, name) = match part.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, part),
        };
        let set: Vec<Attack> = match name {
            "default" => Attack::ALL
                .iter()
                .copied()
                .filter(|a| a.is_default() && gates.open(*a))
                .collect(),
            "all" => Attack::ALL
                .iter()
                .copied()
                .filter(|a| gates.open(*a))
                .collect(),
            n => vec![Attack::from_name(n).ok_or_else(|| {
                let names: Vec<&str> = Attack::ALL.iter().map(|a| a.name()).collect();
                format!(
                    "unknown attack `{n}` (known: default, all, {})",
                    names.join(", ")
                )
            })?],
        };
        for a in set {
            if remove {
                out.retain(|x| *x != a);
            } else if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    if let Some(a) = out.iter().find(|a| !gates.open(**a)) {
        let gate = a.gate().map_or("", |g| g.flag());
        return Err(match a.gate() {
            Some(attack::Gate::OriginForbidden) => {
                format!("{} needs {gate} (an origin the server refuses)", a.name())
            }
            Some(attack::Gate::AdminUrl) => {
                format!("{} needs {gate} (the admin listener)", a.name())
            }
            Some(attack::Gate::H2) => format!(
                "{} needs {gate} (the public listener over TLS, serving HTTP/2)",
                a.name()
            ),
            _ => format!(
                "{} needs {gate} (a server running the soak's hooks, deploy/hostile-soak.sh)",
                a.name()
            ),
        });
    }
    if out.is_empty() {
        return Err("--attacks selects no attack".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Gates = Gates {
        origin_forbidden: false,
        admin_url: false,
        hooked: false,
        h2: false,
    };

    #[test]
    fn attack_selection() {
        let d = parse_attacks("default", NONE).unwrap();
        assert!(!d.contains(&Attack::WsBadOrigin));
        assert!(!d.contains(&Attack::TopicSpray));
        assert!(!d.contains(&Attack::AdminCrossSite));
        assert!(!d.contains(&Attack::HookUnavailableAllow));
        assert!(d.contains(&Attack::BadLimit));
        let gated = Attack::ALL.iter().filter(|a| a.gate().is_some()).count();
        assert_eq!(d.len(), Attack::ALL.len() - 1 - gated);
        let origin = Gates {
            origin_forbidden: true,
            ..NONE
        };
        assert!(
            parse_attacks("default", origin)
                .unwrap()
                .contains(&Attack::WsBadOrigin)
        );
        assert_eq!(
            parse_attacks("ws_ping_flood, slowloris", NONE).unwrap(),
            vec![Attack::WsPingFlood, Attack::Slowloris]
        );
        let minus = parse_attacks("default,-slowloris", NONE).unwrap();
        assert_eq!(minus.len(), d.len() - 1);
        assert!(parse_attacks("nope", NONE).is_err());
        assert!(parse_attacks("ws_bad_origin", NONE).is_err());
        assert!(parse_attacks("slowloris,-slowloris", NONE).is_err());
        assert!(
            parse_attacks("all", NONE)
                .unwrap()
                .contains(&Attack::TopicSpray)
        );
    }

    #[test]
    fn gated_attacks_need_their_flags() {
        let e = parse_attacks("admin_cross_site", NONE).unwrap_err();
        assert!(e.contains("--admin-url"), "{e}");
        let e = parse_attacks("pattern_past_hook", NONE).unwrap_err();
        assert!(e.contains("--hooked"), "{e}");
        let open = Gates {
            origin_forbidden: false,
            admin_url: true,
            hooked: true,
            h2: false,
        };
        let d = parse_attacks("default", open).unwrap();
        for a in catalogue::TRUST {
            assert!(d.contains(&a), "{}", a.name());
        }
        assert!(!d.contains(&Attack::WsBadOrigin));
    }
}
