//! The first hour's traps, as a user meets them: a printed configuration copied to every
//! node, a listen address without a host, a port in use, an unknown `HERALD_` variable,
//! publishing where it is not served. Each error points at the fix.

use super::*;

/// The README's trap: a printed configuration pinned the node id this start picked at random,
/// so every node given the file had the same id and the second one waited for the first's
/// lease and exited. The id is now printed commented out: printing twice gives the same text,
/// the file loads back, and two nodes started from it run side by side (with a Redis, each
/// with its own id in the cluster). An id that was set is printed as set.
#[test]
fn a_printed_configuration_is_safe_to_copy_to_every_node() {
    let first = print_config(&[]);
    assert_eq!(first, print_config(&[]), "a random value is printed");
    let config: toml::Table = toml::from_str(&first).unwrap();
    assert!(config["cluster"].get("node_id").is_none(), "{first}");
    assert!(first.contains("# node_id = "), "{first}");

    let dir = std::env::temp_dir().join(format!("herald-cli-printed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    let redis = std::env::var("HERALD_TEST_REDIS_URL").ok();
    // Its own keys on a shared Redis: the only change to the printed file.
    let prefix = format!("cli-printed-{:x}", rand::random::<u32>());
    let text = first.replace(
        "redis_prefix = \"herald\"",
        &format!("redis_prefix = \"{prefix}\""),
    );
    std::fs::write(&file, &text).unwrap();
    let path = file.display().to_string();
    assert_eq!(print_config(&["--config", &path]), text, "loads back");

    let start = || {
        let mut cmd = herald_on_any_port();
        cmd.args(["--config", &path]);
        if let Some(url) = &redis {
            cmd.args(["--redis-url", url]);
        }
        Herald::start(cmd)
    };
    let nodes = [start(), start()];
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        loop {
            let (status, body) = http(node.admin, "GET", "/readyz", "");
            if status == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "not ready: {status} {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if redis.is_some() {
        loop {
            let (status, body) = http(nodes[0].admin, "GET", "/v1/cluster/nodes", "");
            let listed: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let ids: std::collections::BTreeSet<_> = listed["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n["node"].as_str())
                .collect();
            if status == 200 && ids.len() == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "two nodes: {status} {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        eprintln!("the two nodes ran without Redis: HERALD_TEST_REDIS_URL is not set");
    }
    for mut node in nodes {
        assert!(node.child.try_wait().unwrap().is_none(), "a node exited");
    }
    std::fs::remove_dir_all(dir).unwrap();

    let pinned = print_config(&["--node-id", "n1"]);
    assert!(pinned.contains("\nnode_id = \"n1\"\n"), "{pinned}");
    let out = herald()
        .arg("--print-config")
        .env("HERALD_NODE_ID", "n2")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nnode_id = \"n2\"\n"));
}

/// `--listen 8080` (or `localhost:8080`) says what an address looks like.
#[test]
fn a_listen_address_without_a_host_gets_a_hint() {
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--listen", "8080"], "", "0.0.0.0:8080"),
        (&["--admin-listen", "localhost:9090"], "", "127.0.0.1:9090"),
        (&["--listen", "::1:8080"], "", "[::1]:8080"),
        (&[], "8081", "0.0.0.0:8081"),
    ];
    for (args, env, hint) in cases {
        let mut cmd = herald();
        cmd.args(args);
        if !env.is_empty() {
            cmd.env("HERALD_LISTEN", env);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(hint), "{args:?} {env}: {err}");
    }
}

/// A port another process holds: the error names the setting and says what to do, once.
#[test]
fn a_port_in_use_names_the_flag_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for format in ["text", "json"] {
        let out = herald()
            .args(["--listen", &addr, "--admin-listen", "127.0.0.1:0"])
            .args(["--log-format", format])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(
            err.matches("cannot listen on").count(),
            1,
            "{format}: {err}"
        );
        assert!(err.contains(&addr), "{err}");
        assert!(
            err.contains("--listen") && err.contains("HERALD_LISTEN"),
            "{err}"
        );
        assert!(err.contains("another process"), "{err}");
    }
    let out = herald()
        .args(["--listen", "127.0.0.1:0", "--admin-listen", &addr])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--admin-listen") && err.contains("admin"),
        "{err}"
    );
}

/// A misspelled `HERALD_*` variable is named at start, with the one it is probably meant to
/// be; the known ones (flags' twins, Kafka properties) are not.
#[test]
fn an_unknown_herald_variable_is_warned_about() {
    let out = herald()
        .arg("--print-config")
        .env("HERALD_LISTN", "127.0.0.1:1")
        .env("HERALD_ADMIN_LISTEN", "127.0.0.1:2")
        .env("HERALD_KAFKA_PROPERTIES_CLIENT_ID", "x")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HERALD_LISTN") && err.contains("HERALD_LISTEN"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let mut serving = herald_on_any_port();
    serving.env("HERALD_REDIS_ULR", "redis://127.0.0.1:1");
    let seen = log_before_listening(serving);
    assert!(
        seen.iter().any(|l| l.contains("WARN")
            && l.contains("HERALD_REDIS_ULR")
            && l.contains("HERALD_REDIS_URL")),
        "{seen:?}"
    );
}

/// Publishing on the public listener where it is not served: the 404 says where it is
/// served and what would serve it here.
#[test]
fn publishing_where_it_is_not_served_says_what_is_needed() {
    let herald = Herald::start(herald_on_any_port());
    for path in ["/v1/publish", "/v1/publish/batch"] {
        let (status, body) = http(herald.public, "POST", path, r#"{"topic":"t","data":1}"#);
        assert_eq!(status, 404, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["code"], "publish_not_served", "{body}");
        let reason = body["reason"].as_str().unwrap();
        for needed in [
            "--dev",
            "--auth-api-keys",
            "--hooks-publish-url",
            "admin listener",
            "admin_listen",
        ] {
            assert!(reason.contains(needed), "{needed} in {reason}");
        }
    }
    // Where it is served, it is served.
    let mut cmd = herald_on_any_port();
    cmd.arg("--dev");
    let dev = Herald::start(cmd);
    let (status, body) = http(
        dev.public,
        "POST",
        "/v1/publish",
        r#"{"topic":"t","data":1}"#,
    );
    assert_eq!(status, 200, "{body}");
}
