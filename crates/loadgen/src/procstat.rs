//! Process measurements from `/proc` and clocks: CPU time and resident memory of the servers
//! under test and of the loadgen itself, and the file-descriptor limit.

use std::fs;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use rustix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};

/// One sample of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcSample {
    /// utime + stime, in microseconds.
    pub cpu_us: u64,
    /// VmRSS in KiB.
    pub rss_kb: u64,
}

/// CPU time of this process (all threads), microseconds.
pub(crate) fn own_cpu_micros() -> u64 {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

/// CPU time of the calling thread, microseconds.
pub(crate) fn thread_cpu_micros() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

/// Parses utime + stime (clock ticks) out of a `/proc/PID/stat` line.
pub(crate) fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    // the command name (field 2) may contain spaces and parentheses: skip past the last ')'
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // rest starts at field 3 (state); utime is field 14, stime field 15
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Parses VmRSS (KiB) out of `/proc/PID/status`.
pub(crate) fn parse_status_rss_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Samples process `pid`; `None` if it does not exist (any more).
pub(crate) fn sample(pid: u32) -> Option<ProcSample> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ticks = parse_stat_cpu_ticks(&stat)?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Some(ProcSample {
        cpu_us: ticks * 1_000_000 / hz,
        rss_kb: parse_status_rss_kb(&status).unwrap_or(0),
    })
}

/// The process name (`/proc/PID/comm`).
pub(crate) fn name(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Number of CPUs of the machine (online CPUs in `/proc/stat`).
pub(crate) fn machine_cpus() -> usize {
    let from_proc = fs::read_to_string("/proc/stat")
        .map(|s| {
            s.lines()
                .filter(|l| {
                    l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
                })
                .count()
        })
        .unwrap_or(0);
    if from_proc > 0 {
        from_proc
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Raises the soft open-files limit to the hard limit; returns the new soft limit.
pub(crate) fn raise_nofile_limit() -> u64 {
    let lim = getrlimit(Resource::Nofile);
    if lim.maximum.is_some() && lim.current != lim.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let stat = "1234 (my (odd) srv) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 100 1000000 500 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(325));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn parses_status_rss() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t  4321 kB\nThreads:\t1\n";
        assert_eq!(parse_status_rss_kb(status), Some(4321));
        assert_eq!(parse_status_rss_kb("Name: x\n"), None);
    }

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_kb > 0);
        assert!(machine_cpus() >= 1);
        assert!(own_cpu_micros() > 0);
        assert!(sample(u32::MAX).is_none());
    }
}
