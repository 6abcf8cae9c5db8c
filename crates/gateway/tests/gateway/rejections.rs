//! Every rejection a client can cause, on both listeners, is the documented JSON error
//! (`{"code":..,"reason":..}` with `content-type: application/json`), path segments and
//! methods included; and the keyless admin listener refuses Host oddities (issue 39, items 3
//! and 4).

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::*;

/// The answer to a raw HTTP/1.1 request: status, content type and body (JSON or `Null`).
async fn raw(addr: SocketAddr, head: &str) -> (u16, String, Value) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
        .await
        .expect("the gateway answers and closes")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).to_string();
    let end = text.find("\r\n\r\n").expect("a whole head");
    let kind = text[..end]
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    let body = serde_json::from_slice(&answer[end + 4..]).unwrap_or(Value::Null);
    (text[9..12].parse().unwrap(), kind, body)
}

/// A request of `method` for `path`, with these extra header lines, closing after.
fn head(method: &str, path: &str, extra: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{extra}content-length: 0\r\nconnection: close\r\n\r\n"
    )
}

fn assert_json_error(answer: &(u16, String, Value), status: u16, code: &str, what: &str) {
    let (got, kind, body) = answer;
    assert_eq!(
        (*got, kind.as_str(), body["code"].as_str()),
        (status, "application/json", Some(code)),
        "{what}: {body}"
    );
    assert!(
        body["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{what}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_path_segments_and_methods_get_the_documented_json_error_on_both_listeners() {
    let gw = spawn_gateway(test_config()).await;
    let (public, admin) = (gw.public_addr, gw.admin_addr);
    let json = "content-type: application/json\r\n";
    let cases = [
        (public, "GET", "/v1/topics/%FF/history", ""),
        (admin, "GET", "/v1/topics/%FF/history", ""),
        (admin, "GET", "/v1/topics/%FF", ""),
        (admin, "GET", "/v1/topics/%C3%28", ""),
        (admin, "GET", "/v1/presence/%FF", ""),
        (admin, "GET", "/v1/users/%FF/connections", ""),
        (admin, "POST", "/v1/users/%FF/send", json),
        (admin, "POST", "/v1/users/%FF/disconnect", json),
        (admin, "POST", "/v1/users/%FF/subscribe", json),
        (admin, "POST", "/v1/connections/%FF/send", json),
        (admin, "GET", "/v1/tail/%FF", ""),
    ];
    for (addr, method, path, extra) in cases {
        let answer = raw(addr, &head(method, path, extra)).await;
        assert_json_error(
            &answer,
            400,
            "bad_path",
            &format!("{method} {path} on {addr}"),
        );
    }
    // A method a route does not answer.
    for (addr, method, path) in [
        (admin, "POST", "/v1/topics/news"),
        (admin, "DELETE", "/v1/publish"),
        (admin, "PUT", "/metrics"),
        (public, "POST", "/v1/topics/news/history"),
        (public, "DELETE", "/v1/poll"),
    ] {
        let answer = raw(addr, &head(method, path, json)).await;
        assert_json_error(
            &answer,
            405,
            "method_not_allowed",
            &format!("{method} {path} on {addr}"),
        );
    }
    // Good segments are served as before.
    publish(&gw, "news", serde_json::json!(1)).await;
    let (status, _, body) = raw(admin, &head("GET", "/v1/topics/news", "")).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = raw(public, &head("GET", "/v1/topics/news/history", "")).await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyless_admin_listener_refuses_host_oddities() {
    let gw = spawn_gateway(test_config()).await;
    let admin = gw.admin_addr;
    let request = |hosts: &[&str]| {
        let hosts: String = hosts.iter().map(|h| format!("host: {h}\r\n")).collect();
        format!("GET /v1/topics HTTP/1.1\r\n{hosts}connection: close\r\n\r\n")
    };
    for host in [
        "[::1]evil.example",
        "[::1]evil.example:9090",
        "[::1]:evil",
        "[::1",
    ] {
        let answer = raw(admin, &request(&[host])).await;
        assert_json_error(&answer, 403, "host_not_allowed", host);
    }
    for hosts in [
        ["127.0.0.1", "evil.example"],
        ["[::1]", "rebind.evil.example"],
        ["127.0.0.1", "127.0.0.1"],
    ] {
        let answer = raw(admin, &request(&hosts)).await;
        assert_json_error(&answer, 400, "bad_host", &format!("{hosts:?}"));
    }
    // What a local client sends is served.
    for host in ["[::1]", "[::1]:9090", "127.0.0.1:9090", "localhost"] {
        let (status, _, body) = raw(admin, &request(&[host])).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    gw.stop().await.unwrap();
}
