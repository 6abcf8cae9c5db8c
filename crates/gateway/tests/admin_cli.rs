//! `herald health` and the admin listener's start-up rule, as a user runs the binary.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Output, Stdio};

const KEY: &str = "cli-admin-key-0123456789";

fn herald() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
    for (key, _) in std::env::vars() {
        if key.starts_with("HERALD_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A gateway process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `herald ARGS` and returns once it logs that it is listening (other lines, such as
/// a bridge's first connection error, may come before).
fn start(args: &[&str]) -> Running {
    let mut child = herald()
        .args(args)
        .args(["--log-format", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let running = Running(child);
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("herald exited before listening: {seen:?}"))
            .unwrap();
        if line.contains("herald listening") {
            break;
        }
        seen.push(line);
        assert!(seen.len() < 50, "herald did not say it listens: {seen:?}");
    }
    // Keep reading so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    running
}

fn health(args: &[&str]) -> Output {
    herald().arg("health").args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn health_exits_zero_when_ready_and_gives_the_reason_otherwise() {
    let (public, admin) = (free_port(), free_port());
    let _gw = start(&[
        "--listen",
        &format!("127.0.0.1:{public}"),
        "--admin-listen",
        &format!("127.0.0.1:{admin}"),
    ]);

    let out = health(&["--admin", &format!("http://127.0.0.1:{admin}")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("answered 200: ready"),
        "{}",
        text(&out.stdout)
    );

    // Without --admin it asks the configured admin listener, on loopback for 0.0.0.0.
    let out = herald()
        .env("HERALD_ADMIN_LISTEN", format!("0.0.0.0:{admin}"))
        .arg("health")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Nothing listening.
    let out = health(&["--admin", &format!("127.0.0.1:{}", free_port())]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot connect"),
        "{}",
        text(&out.stderr)
    );

    // A bad address is a usage error.
    for bad in ["https://127.0.0.1:1", "no-port", "127.0.0.1:99999"] {
        let out = health(&["--admin", bad]);
        assert_eq!(out.status.code(), Some(64), "{bad}");
        assert!(text(&out.stderr).contains(bad), "{}", text(&out.stderr));
    }
}

#[test]
fn health_reports_a_node_that_is_up_but_not_ready() {
    // A Redis bridge whose Redis is not there: the node serves, /readyz answers 503.
    let (public, admin, redis) = (free_port(), free_port(), free_port());
    let _gw = start(&[
        "--listen",
        &format!("127.0.0.1:{public}"),
        "--admin-listen",
        &format!("127.0.0.1:{admin}"),
        "--redis-url",
        &format!("redis://127.0.0.1:{redis}"),
    ]);
    let out = health(&["--admin", &format!("127.0.0.1:{admin}")]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("answered 503") && err.contains("redis"),
        "{err}"
    );
    // Alive all the same.
    let out = health(&["--admin", &format!("127.0.0.1:{admin}/healthz")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn an_exposed_admin_listener_needs_keys_or_the_insecure_flag() {
    let public = format!("127.0.0.1:{}", free_port());
    let exposed = format!("0.0.0.0:{}", free_port());
    let out = herald()
        .args(["--listen", &public, "--admin-listen", &exposed])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = text(&out.stderr);
    assert!(
        err.contains("not on a loopback address")
            && err.contains("HERALD_ADMIN_API_KEYS")
            && err.contains("--admin-insecure"),
        "{err}"
    );

    let out = herald()
        .args(["--admin-api-keys", "short", "--print-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("admin.api_keys"),
        "{}",
        text(&out.stderr)
    );

    // The environment twin of the key works, and the key is never printed.
    let out = herald()
        .args([
            "--listen",
            &public,
            "--admin-listen",
            &exposed,
            "--print-config",
        ])
        .env("HERALD_ADMIN_API_KEYS", KEY)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        printed.contains("[admin]") && !printed.contains(KEY),
        "{printed}"
    );
    let out = herald()
        .args([
            "--listen",
            &public,
            "--admin-listen",
            &exposed,
            "--admin-insecure",
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("insecure = true"));
    let help = text(&herald().arg("--help").output().unwrap().stdout);
    for flag in [
        "--admin-api-keys",
        "HERALD_ADMIN_API_KEYS",
        "--admin-insecure",
        "health",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn an_exposed_admin_listener_with_a_key_serves_it() {
    let public = free_port();
    let admin = free_port();
    let _gw = start(&[
        "--listen",
        &format!("127.0.0.1:{public}"),
        "--admin-listen",
        &format!("0.0.0.0:{admin}"),
        "--admin-api-keys",
        KEY,
    ]);
    // The health check needs no key.
    let out = herald()
        .env("HERALD_ADMIN_LISTEN", format!("0.0.0.0:{admin}"))
        .args(["health", "--timeout", "5s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}
