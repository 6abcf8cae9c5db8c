// Each test binary that includes this uses part of it.
#![allow(dead_code)]

//! A `herald` process as the binary's tests start it: on ports the kernel picks (give it
//! `127.0.0.1:0`), its addresses read from its `herald listening` log line, and its log read
//! to the end on a thread of its own, so that it never blocks on a full pipe; the lines come
//! through [`Herald::lines`].

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

/// The `herald` binary, with none of the caller's `HERALD_*` variables (the test sets
/// what it means to).
pub(crate) fn herald() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
    for (key, _) in std::env::vars() {
        if key.starts_with("HERALD_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A running `herald`, killed when dropped.
pub(crate) struct Herald {
    /// The process.
    pub child: Child,
    /// Where its public listener is bound.
    pub public: SocketAddr,
    /// Where its admin listener is bound.
    pub admin: SocketAddr,
    /// Its log lines after `herald listening` (JSON).
    pub lines: Receiver<String>,
}

impl Herald {
    /// Starts `command` (a `herald` with its listen addresses) logging JSON at `info`, and
    /// returns once it says where it listens. Panics with what it said if it exits first.
    pub(crate) fn start(mut command: Command) -> Herald {
        let mut child = command
            .args(["--log-format", "json", "--log-filter", "info"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let listening = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("herald listening") => break line,
                Some(Ok(line)) => {
                    seen.push(line);
                    assert!(seen.len() < 200, "herald did not say it listens: {seen:?}");
                }
                _ => {
                    let _ = child.kill();
                    panic!("herald exited before listening: {seen:?}");
                }
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                // Nobody listening any more is fine: keep draining.
                let _ = tx.send(line);
            }
        });
        Herald {
            child,
            public: address(&listening, "public"),
            admin: address(&listening, "admin"),
            lines: rx,
        }
    }
}

impl Drop for Herald {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address logged as `"<field>":"<address>"`.
fn address(line: &str, field: &str) -> SocketAddr {
    line.split(&format!("\"{field}\":\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no {field} address in {line}"))
}
