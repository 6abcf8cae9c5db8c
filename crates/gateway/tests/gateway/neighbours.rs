//! IPv6 neighbours (issue 39, item 2): addresses of one /64 are one client for every
//! per-address limit. Driven from real addresses of a documentation prefix (2001:db8::/32)
//! on the loopback of a network namespace the test makes for itself: it runs itself again
//! under `unshare -rn` (a user and a network namespace; no privilege needed where
//! unprivileged user namespaces are allowed), and is skipped, saying why, where that fails.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::*;

/// Set in the copy of the test that runs inside the namespace.
const INSIDE: &str = "HERALD_TEST_INSIDE_NETNS";

/// Runs test `name` of this binary again inside a fresh user and network namespace; `false`
/// (after saying why) when this machine cannot make one.
fn rerun_in_namespace(name: &str) -> bool {
    let usable = Command::new("unshare")
        .args(["-rn", "ip", "link", "set", "lo", "up"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !usable {
        eprintln!(
            "skipped: `unshare -rn` with `ip` cannot make a network namespace here (no unshare/ip, or user namespaces are not allowed)"
        );
        return false;
    }
    let status = Command::new("unshare")
        .arg("-rn")
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .status()
        .unwrap();
    assert!(status.success(), "{name} failed inside its namespace");
    true
}

/// Brings up the namespace's loopback with `addresses` on it.
fn loopback_with(addresses: &[&str]) {
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["link", "set", "lo", "up"]);
    for a in addresses {
        ip(&[
            "-6",
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            "lo",
            "nodad",
        ]);
    }
}

/// Opens an SSE request to `server` from `source`; the first line of the answer's head.
async fn sse_from(source: &str, server: SocketAddr) -> (tokio::net::TcpStream, String) {
    let source: IpAddr = source.parse().unwrap();
    // The routes of addresses just added can take a moment to be usable.
    let started = std::time::Instant::now();
    let mut tcp = loop {
        let socket = tokio::net::TcpSocket::new_v6().unwrap();
        socket.bind(SocketAddr::new(source, 0)).unwrap();
        match socket.connect(server).await {
            Ok(tcp) => break tcp,
            Err(e) if started.elapsed() < WAIT => {
                eprintln!("from {source}: {e}; again");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("from {source} to {server}: {e}"),
        }
    };
    tcp.write_all(b"GET /v1/sse?topic=n HTTP/1.1\r\nhost: [2001:db8:1:2::1]\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut byte))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before answering: {head:?}");
        head.push(byte[0]);
    }
    (tcp, String::from_utf8_lossy(&head).trim().to_string())
}

#[test]
fn addresses_of_one_ipv6_64_share_one_address_s_limits() {
    if std::env::var_os(INSIDE).is_none() {
        rerun_in_namespace("neighbours::addresses_of_one_ipv6_64_share_one_address_s_limits");
        return;
    }
    let same = [
        "2001:db8:1:2::1",
        "2001:db8:1:2::a",
        "2001:db8:1:2::b",
        "2001:db8:1:2::c",
    ];
    let other = "2001:db8:1:3::1";
    let mut addresses = same.to_vec();
    addresses.push(other);
    loopback_with(&addresses);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut config = test_config();
        config.listen = "[2001:db8:1:2::1]:0".parse().unwrap();
        config.limits.max_connections_per_address = 2;
        let gw = spawn_gateway(config).await;
        let server = gw.public_addr;
        // Two connections from two addresses of the /64: its whole allowance.
        let (_a, first) = sse_from(same[1], server).await;
        let (_b, second) = sse_from(same[2], server).await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        assert!(second.starts_with("HTTP/1.1 200"), "{second}");
        // A third address of the same /64 is the same client: refused.
        let (_c, third) = sse_from(same[3], server).await;
        assert!(third.starts_with("HTTP/1.1 429"), "{third}");
        // Another /64 is another client.
        let (_d, elsewhere) = sse_from(other, server).await;
        assert!(elsewhere.starts_with("HTTP/1.1 200"), "{elsewhere}");
        gw.stop().await.unwrap();
    });
}

#[test]
fn each_ipv6_address_is_its_own_client_with_a_128_bit_prefix() {
    if std::env::var_os(INSIDE).is_none() {
        rerun_in_namespace("neighbours::each_ipv6_address_is_its_own_client_with_a_128_bit_prefix");
        return;
    }
    let same = ["2001:db8:1:2::1", "2001:db8:1:2::a", "2001:db8:1:2::b"];
    loopback_with(&same);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut config = test_config();
        config.listen = "[2001:db8:1:2::1]:0".parse().unwrap();
        config.limits.max_connections_per_address = 1;
        config.limits.ipv6_prefix = 128;
        let gw = spawn_gateway(config).await;
        let (_a, first) = sse_from(same[1], gw.public_addr).await;
        let (_b, second) = sse_from(same[2], gw.public_addr).await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        assert!(second.starts_with("HTTP/1.1 200"), "{second}");
        gw.stop().await.unwrap();
    });
}
