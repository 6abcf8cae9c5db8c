//! Per-address limits: open connections and new connections per second from one client
//! address, checked in the accept loop before anything else is spent on the connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The address holds its maximum of open connections.
    TooManyFromAddress,
    /// The address opens connections faster than allowed.
    ConnectRate,
}

#[derive(Debug)]
struct Entry {
    open: u32,
    tokens: f64,
    refilled: Instant,
}

/// Open connections and a token bucket of new connections per client address.
///
/// Bounded: an entry exists only for an address with open connections or a bucket still
/// refilling; [`Self::sweep`] drops the others, and past `max_entries` addresses new ones are
/// not rate-limited (they are still counted against the connection limits).
#[derive(Debug)]
pub struct AddressLimits {
    max_open: u32,
    rate: f64,
    burst: f64,
    max_entries: usize,
    entries: Mutex<HashMap<IpAddr, Entry>>,
}

/// What a connection holds while it is open: its place under the global limit and under its
/// address's. Moved into whichever task serves the connection for its whole life.
#[derive(Debug, Default)]
pub struct Permits {
    /// The global connection limit's permit.
    pub global: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The per-address permit.
    pub address: Option<AddressPermit>,
}

/// Holds one connection's place; releases it when dropped.
#[derive(Debug)]
pub struct AddressPermit {
    limits: Arc<AddressLimits>,
    ip: IpAddr,
}

impl AddressLimits {
    /// At most `max_open` open connections and `rate` new connections per second (bursts of
    /// `burst`) per address.
    pub fn new(max_open: u32, rate: f64, burst: f64, max_entries: usize) -> Arc<Self> {
        Arc::new(Self {
            max_open,
            rate,
            burst: burst.max(1.0),
            max_entries,
            entries: Mutex::new(HashMap::new()),
        })
    }

    /// Admits a new connection from `ip`, or says why not.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<AddressPermit, Refusal> {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        let full = entries.len() >= self.max_entries;
        let entry = match entries.get_mut(&ip) {
            Some(e) => e,
            // Past the bound, new addresses are not tracked (fail open rather than grow).
            None if full => {
                return Ok(AddressPermit {
                    limits: self.clone(),
                    ip,
                });
            }
            None => entries.entry(ip).or_insert(Entry {
                open: 0,
                tokens: self.burst,
                refilled: now,
            }),
        };
        entry.tokens = (entry.tokens
            + now.duration_since(entry.refilled).as_secs_f64() * self.rate)
            .min(self.burst);
        entry.refilled = now;
        if entry.open >= self.max_open {
            return Err(Refusal::TooManyFromAddress);
        }
        if entry.tokens < 1.0 {
            return Err(Refusal::ConnectRate);
        }
        entry.tokens -= 1.0;
        entry.open += 1;
        Ok(AddressPermit {
            limits: self.clone(),
            ip,
        })
    }

    /// Drops the entries of addresses with no open connection and a full bucket.
    pub fn sweep(&self) {
        let now = Instant::now();
        let (rate, burst) = (self.rate, self.burst);
        self.entries.lock().retain(|_, e| {
            let tokens = e.tokens + now.duration_since(e.refilled).as_secs_f64() * rate;
            e.open > 0 || tokens < burst
        });
    }

    /// Addresses tracked.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for AddressPermit {
    fn drop(&mut self) {
        if let Some(e) = self.limits.entries.lock().get_mut(&self.ip) {
            e.open = e.open.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_open_connections_and_rate_per_address() {
        let limits = AddressLimits::new(2, 0.0001, 3.0, 100);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let p1 = limits.admit(a).unwrap();
        let _p2 = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).unwrap_err(), Refusal::TooManyFromAddress);
        assert!(limits.admit(b).is_ok());
        drop(p1);
        // Room again, but the burst of 3 is spent.
        let _p3 = limits.admit(a).unwrap();
        drop(_p3);
        assert_eq!(limits.admit(a).unwrap_err(), Refusal::ConnectRate);
    }

    #[test]
    fn sweep_forgets_idle_addresses() {
        let limits = AddressLimits::new(10, 1_000_000.0, 1.0, 100);
        let p = limits.admit("10.0.0.1".parse().unwrap()).unwrap();
        drop(p);
        std::thread::sleep(std::time::Duration::from_millis(5));
        limits.sweep();
        assert!(limits.is_empty());
    }
}
