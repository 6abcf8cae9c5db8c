//! The `herald` binary as a user runs it.

use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/process.rs"]
mod process;

use process::{Herald, herald};

/// `herald` on loopback ports the kernel picks.
fn herald_on_any_port() -> Command {
    let mut cmd = herald();
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    cmd
}

/// README.md, read from the repository.
fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap()
}

/// Each flag of `herald --help` that has an environment twin: flag → (twin, default).
fn help_flags() -> std::collections::BTreeMap<String, (String, String)> {
    let out = herald().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let mut flags = std::collections::BTreeMap::new();
    let mut current: Option<(String, String, String)> = None;
    let mut finish = |c: Option<(String, String, String)>| {
        if let Some((flag, env, default)) = c.filter(|c| !c.1.is_empty()) {
            flags.insert(flag, (env, default));
        }
    };
    for line in help.lines() {
        let trimmed = line.trim_start();
        if line.starts_with("  ") && trimmed.starts_with("--") && line.len() - trimmed.len() <= 6 {
            finish(current.take());
            let flag = trimmed.split([' ', '=']).next().unwrap().to_string();
            current = Some((flag, String::new(), String::new()));
        }
        let Some((_, env, default)) = current.as_mut() else {
            continue;
        };
        if let Some(rest) = line.split("[env: ").nth(1) {
            *env = rest.split(['=', ']']).next().unwrap().to_string();
        }
        if let Some(rest) = line.split("[default: ").nth(1) {
            *default = rest.rsplit_once(']').unwrap().0.to_string();
        }
    }
    finish(current);
    flags
}

#[test]
fn the_readme_flag_table_is_what_help_says() {
    let readme = readme();
    let table = readme
        .split("| flag | environment | default |")
        .nth(1)
        .expect("the README's flag table");
    let mut rows = std::collections::BTreeMap::new();
    for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line
            .split(" | ")
            .map(|c| c.trim_matches(['|', ' ']))
            .collect();
        let flag = cells[0]
            .trim_matches('`')
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        let env = cells[1].split('`').nth(1).unwrap().to_string();
        let default = cells[2].replace('`', "");
        rows.insert(flag, (env, default));
    }
    let help = help_flags();
    assert!(help.len() >= 20, "every flag with a twin: {help:?}");
    let mut diff = Vec::new();
    for (flag, twin_default) in &help {
        match rows.get(flag) {
            None => diff.push(format!("{flag} is in --help, not in the README")),
            Some(row) if row != twin_default => {
                diff.push(format!("{flag}: README {row:?}, --help {twin_default:?}"))
            }
            Some(_) => {}
        }
    }
    for flag in rows.keys().filter(|f| !help.contains_key(*f)) {
        diff.push(format!("{flag} is in the README, not in --help"));
    }
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

/// Every leaf of `table` as `section.key` → value.
fn leaves(
    table: &toml::Table,
    prefix: &str,
    out: &mut std::collections::BTreeMap<String, toml::Value>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(t) => leaves(t, &path, out),
            v => {
                out.insert(path, v.clone());
            }
        }
    }
}

#[test]
fn the_readme_toml_is_the_default_configuration() {
    let readme = readme();
    let block = readme
        .split("The TOML file, with every key at its default")
        .nth(1)
        .and_then(|rest| rest.split("```toml\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("the README's TOML block");
    let mut documented = std::collections::BTreeMap::new();
    leaves(
        &toml::from_str(block).expect("the README's TOML parses"),
        "",
        &mut documented,
    );
    let out = herald().arg("--print-config").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut printed = std::collections::BTreeMap::new();
    leaves(
        &toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap(),
        "",
        &mut printed,
    );
    assert!(printed.len() >= 60, "{printed:?}");
    let mut diff = Vec::new();
    for (key, value) in &printed {
        match documented.get(key) {
            None => diff.push(format!("{key} = {value} is printed, not in the README")),
            Some(v) if v != value => diff.push(format!("{key}: README {v}, default {value}")),
            Some(_) => {}
        }
    }
    for key in documented.keys().filter(|k| !printed.contains_key(*k)) {
        diff.push(format!(
            "{key} is in the README, not a default (comment it out?)"
        ));
    }
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

#[test]
fn invalid_configuration_exits_64_before_binding() {
    let dir = std::env::temp_dir().join(format!("herald-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_file = dir.join("bad.toml");
    std::fs::write(&bad_file, "listen = 12\n").unwrap();
    let too_many_workers = dir.join("workers.toml");
    std::fs::write(&too_many_workers, "worker_threads = 5000\n").unwrap();
    let unknown_key = dir.join("unknown.toml");
    std::fs::write(&unknown_key, "[sse]\nheartbeet = \"1s\"\n").unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["--listen".into(), "not-an-address".into()],
        vec!["--no-such-flag".into()],
        vec!["--config".into(), bad_file.display().to_string()],
        vec!["--config".into(), unknown_key.display().to_string()],
        vec!["--config".into(), too_many_workers.display().to_string()],
        vec![
            "--config".into(),
            dir.join("missing.toml").display().to_string(),
        ],
        vec![
            "--listen".into(),
            "127.0.0.1:7000".into(),
            "--admin-listen".into(),
            "127.0.0.1:7000".into(),
        ],
        vec!["--sse-heartbeat".into(), "0s".into()],
        vec![
            "--tls-cert".into(),
            dir.join("missing.pem").display().to_string(),
            "--tls-key".into(),
            dir.join("missing.key").display().to_string(),
        ],
    ];
    for args in cases {
        let out = herald().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.trim().is_empty(), "{args:?} printed no reason");
    }
    let out = herald().env("HERALD_LISTEN", "nope").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn print_config_shows_the_effective_configuration() {
    let out = herald()
        .args(["--print-config", "--listen", "127.0.0.1:1234"])
        .args(["--hooks-connect-url", "https://backend.internal/connect"])
        .env("HERALD_ADMIN_LISTEN", "127.0.0.1:4321")
        .env("HERALD_HOOKS_CA_FILE", tls_fixture("ca.pem"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("listen = \"127.0.0.1:1234\""), "{text}");
    assert!(text.contains("admin_listen = \"127.0.0.1:4321\""), "{text}");
    assert!(
        text.contains(&format!(
            "ca_file = {:?}",
            tls_fixture("ca.pem").display().to_string()
        )),
        "{text}"
    );
    assert!(
        text.contains("[sse]") && text.contains("heartbeat = \"15s\""),
        "{text}"
    );
}

/// The flags and environment twins of options tuned per deployment reach the configuration.
#[test]
fn deployment_options_have_flags_and_environment_twins() {
    let out = herald()
        .args([
            "--print-config",
            "--ws-ping-interval",
            "7s",
            "--max-connections",
            "5",
        ])
        .args(["--history-len", "9", "--worker-threads", "3"])
        .env("HERALD_POLL_TIMEOUT", "11s")
        .env("HERALD_MAX_CONNECTIONS_PER_ADDRESS", "4")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: toml::Value = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(config["ws"]["ping_interval"].as_str(), Some("7s"));
    assert_eq!(config["poll"]["timeout"].as_str(), Some("11s"));
    assert_eq!(config["topics"]["history_len"].as_integer(), Some(9));
    assert_eq!(config["limits"]["max_connections"].as_integer(), Some(5));
    assert_eq!(
        config["limits"]["max_connections_per_address"].as_integer(),
        Some(4)
    );
    assert_eq!(config["worker_threads"].as_integer(), Some(3));
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let mut herald = Herald::start(herald_on_any_port());
    let child = &mut herald.child;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "herald did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
}

fn tls_fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// The certificate the server at `port` presents (a full handshake trusting the test CA).
fn presented_certificate(port: u16) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(tls_fixture("ca.pem")).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(
        std::sync::Arc::new(config),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("TLS handshake");
    }
    conn.peer_certificates().unwrap()[0].to_vec()
}

fn certificate_der(name: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::from_pem_file(tls_fixture(name))
        .unwrap()
        .to_vec()
}

#[test]
fn sighup_reloads_the_tls_certificate_and_a_bad_one_is_not_taken() {
    let dir = std::env::temp_dir().join(format!("herald-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::copy(tls_fixture("server-a.pem"), &cert).unwrap();
    std::fs::copy(tls_fixture("server-a.key"), &key).unwrap();
    let mut command = herald_on_any_port();
    command
        .env("HERALD_TLS_CERT", &cert)
        .env("HERALD_TLS_KEY", &key);
    let mut herald = Herald::start(command);
    let public = herald.public.port();
    let mut lines = herald.lines.iter();
    assert_eq!(
        presented_certificate(public),
        certificate_der("server-a.pem")
    );

    let hangup = |pid: u32| {
        let status = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    std::fs::copy(tls_fixture("server-b.pem"), &cert).unwrap();
    std::fs::copy(tls_fixture("server-b.key"), &key).unwrap();
    hangup(herald.child.id());
    let reloaded = lines.next().unwrap();
    assert!(reloaded.contains("TLS certificate reloaded"), "{reloaded}");
    assert_eq!(
        presented_certificate(public),
        certificate_der("server-b.pem")
    );

    // A broken file is refused and the certificate in use stays.
    std::fs::write(&cert, "not a certificate").unwrap();
    hangup(herald.child.id());
    let failed = lines.next().unwrap();
    assert!(failed.contains("TLS reload failed"), "{failed}");
    assert_eq!(
        presented_certificate(public),
        certificate_der("server-b.pem")
    );

    let _ = Command::new("kill")
        .args(["-TERM", &herald.child.id().to_string()])
        .status();
    let exit = herald.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn engine_settings_are_checked_and_their_secrets_never_printed() {
    let (dir, file) = files_dir("engines");
    let good = file(
        "good.toml",
        "[cluster]\nredis_mode = \"sentinel\"\n[cluster.kafka_properties]\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n",
    );
    let out = herald()
        .args(["--print-config", "--config", &good])
        .env(
            "HERALD_REDIS_URL",
            "redis://app:s3cret-pw@127.0.0.1:7001,127.0.0.1:7002",
        )
        .env("HERALD_REDIS_MODE", "cluster")
        .env("HERALD_KAFKA_BROKERS", "127.0.0.1:9093")
        .env("HERALD_KAFKA_PREFIXES", "svc.,prices")
        .env("HERALD_KAFKA_PROPERTIES_SASL_USERNAME", "app")
        .env("HERALD_KAFKA_PROPERTIES_SASL_PASSWORD", "s3cret-pw")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("s3cret"), "{text}");
    assert!(
        text.contains("redis_url = \"redis://app:***@127.0.0.1:7001,127.0.0.1:7002\""),
        "{text}"
    );
    assert!(text.contains("redis_mode = \"cluster\""), "{text}");
    assert!(
        text.contains("kafka_prefixes = [\"svc.\", \"prices\"]"),
        "{text}"
    );
    assert!(
        text.contains("\"sasl.password\" = \"<redacted>\""),
        "{text}"
    );
    assert!(text.contains("\"sasl.username\" = \"app\""), "{text}");
    assert!(
        text.contains("\"sasl.mechanisms\" = \"SCRAM-SHA-512\""),
        "{text}"
    );

    let cases = [
        (
            file("mode.toml", "[cluster]\nredis_mode = \"clustr\"\n"),
            "redis_mode",
        ),
        (
            file(
                "sentinel.toml",
                "[cluster]\nredis_mode = \"sentinel\"\nredis_url = \"redis://u:s3cret-pw@127.0.0.1:1\"\n",
            ),
            "redis+sentinel://",
        ),
        (
            file(
                "ca.toml",
                "[cluster]\nredis_url = \"rediss://u:s3cret-pw@127.0.0.1:1\"\nredis_ca_file = \"/nonexistent/ca.pem\"\n",
            ),
            "cluster.redis_ca_file",
        ),
        (
            file(
                "kafka.toml",
                "[cluster.kafka_properties]\n\"securty.protocol\" = \"SSL\"\n",
            ),
            "securty.protocol",
        ),
    ];
    for (path, reason) in cases {
        let out = herald().args(["--config", &path]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{path}: {err}");
        assert!(err.contains(reason), "{path}: {err}");
        assert!(!err.contains("s3cret"), "{path}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `worker_threads` sets the runtime's workers (named `herald-worker`; the blocking pool's
/// threads would share the name, and none has started yet); one more than the CPUs, so that
/// the default could not pass for it.
/// `cluster.kafka_prefixes` was `cluster.kafka_feeds` (a *feed* is a connection's stream of
/// events: docs/architecture.md, "Vocabulary"). Both names set it, in the file, as a flag and
/// in the environment; the former one with a warning, once, that it is deprecated (on stderr
/// with `--print-config`, a log line when serving). The new name wins over the old; a file
/// giving both is refused.
#[test]
fn kafka_prefixes_is_read_by_its_name_and_by_its_deprecated_former_one() {
    let (dir, file) = files_dir("renamed");
    let new = file("new.toml", "[cluster]\nkafka_prefixes = [\"svc.\"]\n");
    let old = file("old.toml", "[cluster]\nkafka_feeds = [\"svc.\"]\n");
    let cases: [(&[&str], Option<&str>, bool); 6] = [
        (&["--config", &new], None, false),
        (&["--kafka-prefixes", "svc."], None, false),
        (&[], Some("HERALD_KAFKA_PREFIXES"), false),
        (&["--config", &old], None, true),
        (&["--kafka-feeds", "svc."], None, true),
        (&[], Some("HERALD_KAFKA_FEEDS"), true),
    ];
    for (args, env, deprecated) in cases {
        let mut cmd = herald();
        cmd.arg("--print-config").args(args);
        if let Some(env) = env {
            cmd.env(env, "svc.");
        }
        let out = cmd.output().unwrap();
        let (text, err) = (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        );
        assert!(out.status.success(), "{args:?} {env:?}: {err}");
        let config: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            config["cluster"]["kafka_prefixes"],
            toml::Value::Array(vec!["svc.".into()]),
            "{args:?} {env:?}: {text}"
        );
        assert!(!text.contains("kafka_feeds"), "{text}");
        assert_eq!(
            err.matches("deprecated").count(),
            usize::from(deprecated),
            "{args:?} {env:?}: {err}"
        );
        assert!(!deprecated || err.contains("kafka_prefixes") || err.contains("kafka-prefixes"));
    }

    let text = print_config(&["--kafka-prefixes", "new.", "--kafka-feeds", "old."]);
    assert!(text.contains("kafka_prefixes = [\"new.\"]"), "{text}");
    let both = file(
        "both.toml",
        "[cluster]\nkafka_prefixes = [\"a\"]\nkafka_feeds = [\"b\"]\n",
    );
    let out = herald()
        .args(["--print-config", "--config", &both])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));

    let mut serving = herald_on_any_port();
    serving.env("HERALD_KAFKA_FEEDS", "svc.");
    let seen = log_before_listening(serving);
    let warned = seen
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("deprecated"))
        .collect::<Vec<_>>();
    assert_eq!(warned.len(), 1, "{seen:?}");
    assert!(warned[0].contains("HERALD_KAFKA_PREFIXES"), "{seen:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn worker_threads_sets_the_runtime_s_workers() {
    let wanted = std::thread::available_parallelism().map_or(1, usize::from) + 1;
    let dir = std::env::temp_dir().join(format!("herald-workers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    std::fs::write(&file, format!("worker_threads = {wanted}\n")).unwrap();
    let mut cmd = herald_on_any_port();
    cmd.arg("--config").arg(&file);
    let herald = Herald::start(cmd);
    let tasks = format!("/proc/{}/task", herald.child.id());
    let count = || {
        std::fs::read_dir(&tasks)
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim_end() == "herald-worker")
            .count()
    };
    // A thread names itself once it runs: on a loaded machine the last worker may not have
    // yet when the node answers, so the count is read until it settles (or 10 s pass).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut workers = count();
    while workers < wanted && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        workers = count();
    }
    assert_eq!(workers, wanted, "threads named herald-worker in {tasks}");
    drop(herald);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One HTTP/1.1 request to `addr` (`Connection: close`): the status and the body.
fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        tcp,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// A directory of its own for a test's files (`herald-cli-<name>-<pid>` in the system's
/// temporary one), and a writer of a file there that gives back its path.
fn files_dir(name: &str) -> (std::path::PathBuf, impl Fn(&str, &str) -> String) {
    let dir = std::env::temp_dir().join(format!("herald-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let at = dir.clone();
    let file = move |name: &str, text: &str| {
        let path = at.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    (dir, file)
}

/// What `command` (a `herald` with its listen addresses) logs, as JSON, before it says it
/// listens; the process is then killed.
fn log_before_listening(mut command: Command) -> Vec<String> {
    let mut child = command
        .args(["--log-format", "json"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    let mut seen = Vec::new();
    for line in lines.map_while(Result::ok) {
        if line.contains("herald listening") {
            break;
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

/// `herald --print-config` with `args`: its standard output.
fn print_config(args: &[&str]) -> String {
    let out = herald().arg("--print-config").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[path = "cli_support/first_hour.rs"]
mod first_hour;
