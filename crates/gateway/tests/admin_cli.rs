//! `herald health` and the admin listener's start-up rule, as a user runs the binary.

use std::process::Output;

const KEY: &str = "cli-admin-key-0123456789";

#[path = "support/process.rs"]
mod process;

use process::{Herald, herald};

/// Starts `herald ARGS` on loopback ports the kernel picks (an admin listener on `0.0.0.0` when
/// `exposed`) and returns once it says where it listens.
fn start(exposed: bool, args: &[&str]) -> Herald {
    let admin = if exposed { "0.0.0.0:0" } else { "127.0.0.1:0" };
    let mut command = herald();
    command
        .args(["--listen", "127.0.0.1:0", "--admin-listen", admin])
        .args(args);
    Herald::start(command)
}

/// An address nothing listens on: port 1 (tcpmux), privileged and unused here.
const NOBODY: &str = "127.0.0.1:1";

fn health(args: &[&str]) -> Output {
    herald().arg("health").args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn health_exits_zero_when_ready_and_gives_the_reason_otherwise() {
    let gw = start(false, &[]);
    let admin = gw.admin.port();

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
    let out = health(&["--admin", NOBODY]);
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
    let gw = start(false, &["--redis-url", &format!("redis://{NOBODY}")]);
    let admin = gw.admin.port();
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
    // Refused, or only printed: nothing binds.
    let public = "127.0.0.1:0".to_string();
    let exposed = "0.0.0.0:0".to_string();
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
    let gw = start(true, &["--admin-api-keys", KEY]);
    let admin = gw.admin.port();
    // The health check needs no key.
    let out = herald()
        .env("HERALD_ADMIN_LISTEN", format!("0.0.0.0:{admin}"))
        .args(["health", "--timeout", "5s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}
