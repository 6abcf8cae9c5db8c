//! End-to-end tests: the real binary against a tiny in-test server.

mod common;

use common::{args, cmd, run_loadgen, run_report, spawn_faulty_server, spawn_server, temp_path};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks the delivery section: everything expected arrived exactly once, and expected is
/// Σ over topics of published × subscribers.
fn assert_complete_delivery(r: &Value, conns: u64, topics: u64) {
    let c = &r["connections"];
    assert_eq!(u(&c["connected"]), conns, "{c}");
    assert_eq!(u(&c["failed"]), 0);
    assert_eq!(u(&c["dropped"]), 0);
    assert_eq!(u(&c["cohort"]), conns);
    let d = &r["delivery"];
    assert_eq!(d["accounted"], true);
    let published = u(&d["published"]);
    assert!(published > 0, "{d}");
    assert_eq!(u(&d["publish_failed"]), 0);
    let mut expected = 0;
    let per_topic = d["per_topic"].as_array().unwrap();
    assert_eq!(per_topic.len() as u64, topics);
    for t in per_topic {
        assert_eq!(
            u(&t["expected"]),
            u(&t["published"]) * u(&t["subscribers"]),
            "{t}"
        );
        assert_eq!(u(&t["missing"]), 0, "{t}");
        assert_eq!(u(&t["duplicates"]), 0, "{t}");
        expected += u(&t["expected"]);
    }
    assert_eq!(u(&d["expected"]), expected);
    assert_eq!(u(&d["delivered"]), u(&d["expected"]), "{d}");
    assert_eq!(u(&d["missing"]), 0);
    assert_eq!(u(&d["duplicates"]), 0);
    assert_eq!(d["delivery_ratio"].as_f64(), Some(1.0));
    assert!(u(&d["latency_ms"]["count"]) >= expected);
    assert!(d["latency_ms"]["p99_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(r["verdict"]["ok"], true, "{}", r["verdict"]);
}

fn assert_report_fields(r: &Value) {
    for k in [
        "tool", "version", "command", "settings", "phases", "errors", "servers", "loadgen",
        "timeline", "verdict",
    ] {
        assert!(r.get(k).is_some(), "missing field {k}");
    }
    assert!(!r["timeline"].as_array().unwrap().is_empty());
    let s = &r["servers"][0];
    for k in [
        "cpu_seconds_measured",
        "cpu_fraction_of_machine",
        "cpu_us_per_delivery",
        "rss_start_kb",
        "rss_after_connect_kb",
        "rss_peak_kb",
        "rss_end_kb",
        "rss_growth_per_conn_bytes",
    ] {
        assert!(s.get(k).is_some(), "missing server field {k}: {s}");
    }
    assert!(u(&s["rss_peak_kb"]) > 0);
    assert_cpu_accounted(r);
}

/// The loadgen's CPU is in seconds of this run: above zero, and no more than every core of
/// the machine for the whole run (a unit or sampling mistake breaks one or the other).
fn assert_cpu_accounted(r: &Value) {
    let cpu = r["loadgen"]["cpu_seconds"].as_f64().unwrap();
    let cores = r["loadgen"]["machine_cpus"].as_f64().unwrap();
    let wall = r["phases"]["total_secs"].as_f64().unwrap();
    assert!(
        cpu > 0.0 && cpu <= wall * cores + 0.5,
        "{cpu} CPU-s in {wall} s on {cores} cores"
    );
}

/// This process's resident memory now, in kB (what `--server-pid` of this process samples).
fn own_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn sse_subscribers_receive_every_message() {
    let srv = spawn_server();
    let a = srv.cmd(
        "sse --url http://{addr} --publish-url http://{admin} --conns 60 --topics 4 \
         --publish-rate 200 --duration 2s --drain 2s --server-pid {pid}",
        &[],
    );
    let (r, out) = run_report(&a, "sse");
    assert_complete_delivery(&r, 60, 4);
    assert_report_fields(&r);
    assert_eq!(r["settings"]["worker_processes"], 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("verdict: OK"), "{stdout}");
}

#[test]
fn ws_subscribers_receive_every_message() {
    let srv = spawn_server();
    let a = srv.cmd(
        "ws --url ws://{addr} --publish-url http://{admin} --conns 40 --topics 3 \
         --topics-per-conn 2 --publish-rate 150 --duration 2s --drain 2s --server-pid {pid}",
        &[],
    );
    let (r, _) = run_report(&a, "ws");
    assert_complete_delivery(&r, 40, 3);
    // two topics per connection: 40 × 2 subscriptions over 3 topics
    let subs: u64 = r["delivery"]["per_topic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| u(&t["subscribers"]))
        .sum();
    assert_eq!(subs, 80);
}

#[test]
fn worker_processes_merge_counts_and_histograms() {
    let srv = spawn_server();
    let a = srv.cmd(
        "sse --url http://{addr} --publish-url http://{admin} --conns 50 --topics 5 \
         --publish-rate 100 --duration 2s --drain 2s --workers 2 --server-pid {pid}",
        &[],
    );
    let (r, _) = run_report(&a, "workers");
    assert_eq!(r["settings"]["worker_processes"], 2);
    assert_complete_delivery(&r, 50, 5);
    // connect times of both processes were merged
    assert_eq!(u(&r["connections"]["connect_ms"]["count"]), 50);
    // the loadgen's CPU (its worker processes included) is accounted in seconds of this run
    assert_cpu_accounted(&r);
}

#[test]
fn echo_round_trips_are_all_answered() {
    let srv = spawn_server();
    let a = srv.cmd(
        "echo --url ws://{addr} --conns 20 --rate 200 --size 256 --duration 2s --drain 2s",
        &[],
    );
    let (r, _) = run_report(&a, "echo");
    let e = &r["echo"];
    assert!(u(&e["sent"]) >= 300, "{e}");
    assert_eq!(u(&e["answered"]), u(&e["sent"]), "{e}");
    assert_eq!(u(&e["unanswered"]), 0);
    assert_eq!(u(&e["duplicates"]), 0);
    assert!(u(&e["rtt_ms"]["count"]) >= u(&e["sent"]));
    assert_eq!(r["verdict"]["ok"], true, "{}", r["verdict"]);

    // raw mode against a generic echo endpoint
    let a = srv.cmd(
        "echo --raw --url ws://{addr}/echo --conns 10 --rate 100 --duration 1s --drain 2s",
        &[],
    );
    let (r, _) = run_report(&a, "echo-raw");
    let e = &r["echo"];
    assert!(u(&e["sent"]) > 50, "{e}");
    assert_eq!(u(&e["answered"]), u(&e["sent"]), "{e}");
}

#[test]
fn churn_keeps_the_cohort_complete() {
    let srv = spawn_server();
    let a = srv.cmd(
        "churn --url http://{addr} --publish-url http://{admin} --conns 20 --topics 2 \
         --publish-rate 100 --churn-rate 20 --churn-hold 300ms --duration 2s --drain 2s",
        &[],
    );
    let (r, _) = run_report(&a, "churn");
    assert_complete_delivery(&r, 20, 2);
    let c = &r["churn"];
    assert!(u(&c["connected"]) >= 20, "{c}");
    assert_eq!(u(&c["failed"]), 0);
    assert!(u(&c["closed"]) >= 10, "{c}");
}

#[test]
fn publish_reports_achieved_rate() {
    let srv = spawn_server();
    let html = temp_path("publish.html");
    let a = srv.cmd(
        "publish --url http://{admin} --rate 200 --duration 2s --topics 3 --html",
        &[&html],
    );
    let (r, _) = run_report(&a, "publish");
    let p = &r["publish"];
    let ok = u(&p["ok"]);
    assert!((240..=460).contains(&ok), "{p}");
    assert_eq!(u(&p["failed"]), 0);
    assert_eq!(
        ok,
        srv.hub.published.load(std::sync::atomic::Ordering::Relaxed)
    );
    let qps = p["achieved_qps"].as_f64().unwrap();
    assert!((120.0..=230.0).contains(&qps), "{qps}");
    let page = std::fs::read_to_string(&html).unwrap();
    let _ = std::fs::remove_file(&html);
    assert!(page.contains("<svg") && !page.contains("<script"));
}

#[test]
fn html_report_has_inline_charts() {
    let srv = spawn_server();
    let html = temp_path("sse.html");
    let a = srv.cmd(
        "ws --url http://{addr} --publish-url http://{admin} --conns 5 --duration 1s --drain \
         500ms --html",
        &[&html],
    );
    let (r, _) = run_report(&a, "html");
    assert_eq!(r["verdict"]["ok"], true, "{}", r["verdict"]);
    let page = std::fs::read_to_string(&html).unwrap();
    let _ = std::fs::remove_file(&html);
    assert_eq!(page.matches("<svg").count(), 4);
    assert!(!page.contains("<script"));
}

#[test]
fn refuses_non_loopback_targets() {
    let out = run_loadgen(&cmd("sse --url http://10.1.2.3:8080 --duration 1s", &[]));
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("non-loopback"), "{err}");
}

#[test]
fn floor_measures_cpu_per_write() {
    let path = temp_path("floor.json");
    let out = run_loadgen(&cmd("floor --conns 20 --duration 300ms --json", &[&path]));
    assert!(out.status.success());
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(u(&r["writes"]) > 0);
    // The writer thread's CPU is part of the process's.
    let writer = r["writer_cpu_us_per_write"].as_f64().unwrap();
    let process = r["process_cpu_us_per_write"].as_f64().unwrap();
    assert!(
        writer > 0.0 && writer <= process * 1.05 + 0.1,
        "{writer} of {process}"
    );
}

#[test]
fn lost_and_duplicated_messages_are_reported() {
    // the server drops every 7th and duplicates every 5th message on SSE streams
    let srv = spawn_faulty_server(7, 5);
    let json = temp_path("faulty.json");
    let a = srv.cmd(
        "sse --url http://{addr} --publish-url http://{admin} --conns 10 --topics 2 \
         --publish-rate 100 --duration 1s --drain 500ms --strict --json",
        &[&json],
    );
    let out = run_loadgen(&a);
    assert_eq!(
        out.status.code(),
        Some(3),
        "--strict exits 3 on problems: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let d = &r["delivery"];
    let expected = u(&d["expected"]);
    let missing = u(&d["missing"]);
    assert!(expected > 0);
    assert!(missing > 0, "{d}");
    assert!(u(&d["duplicates"]) > 0, "{d}");
    assert_eq!(u(&d["delivered"]) + missing, expected);
    // about one message in seven is missing for every subscriber
    let ratio = missing as f64 / expected as f64;
    assert!((0.08..=0.22).contains(&ratio), "{ratio}");
    assert_eq!(r["verdict"]["ok"], false);
}

#[test]
fn ws_raw_counts_any_frame() {
    let srv = spawn_server();
    // the echo endpoint sends the init frame back: one frame per connection
    let a = srv.cmd(
        "ws --raw --url ws://{addr}/echo --init-frame hello --conns 15 --duration 1s --drain \
         200ms",
        &[],
    );
    let (r, _) = run_report(&a, "ws-raw");
    assert_eq!(u(&r["connections"]["connected"]), 15);
    let d = &r["delivery"];
    assert_eq!(d["accounted"], false);
    assert_eq!(u(&d["receipts"]), 15, "{d}");
    assert_eq!(u(&d["untracked"]), 15);
    assert_eq!(r["verdict"]["ok"], true, "{}", r["verdict"]);
}

#[test]
fn hostile_counts_add_up_while_good_clients_receive() {
    let srv = spawn_server();
    // The stand-in gives every topic a 65,536-slot channel: the attacks naming thousands of
    // topics or patterns (refused or bounded by Herald) would only measure that. At least one
    // loop per attack, so that each starts at once (some hold their connection for most of
    // the attack timeout).
    let a = srv.cmd(
        "hostile --url http://{addr} --attacks \
         default,-ws_subscribe_10k,-too_many_topics,-pattern_lockout --conns 32 --good-conns 10 --topics 2 --publish-url http://{admin} --publish-rate 50 --duration \
         2s --drain 500ms --attack-timeout 1s --slowloris-every 100ms --slowloris-max 1s \
         --ping-flood 200 --huge-bytes 262144 --warmup 0s --health-url http://{admin}/healthz \
         --server-pid {pid}",
        &[],
    );
    let started = std::time::Instant::now();
    let (r, out) = run_report(&a, "hostile");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}\nstdout:\n{}\nstderr:\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(r["command"], "hostile");
    let h = &r["hostile"];
    let attacks = u(&h["attacks"]);
    assert!(attacks > 24, "{h}");
    // every attack of the default catalogue ran (and is reported in catalogue order)
    let by_attack = h["by_attack"].as_array().unwrap();
    assert_eq!(by_attack.len(), h["catalogue"].as_array().unwrap().len());
    assert_eq!(by_attack[0]["attack"], "malformed_request_line");
    // the counts add up: per attack, per outcome, over all attacks
    let mut total = 0;
    let mut unexpected = 0;
    let mut cancelled = 0;
    for a in by_attack {
        let n = u(&a["total"]);
        assert!(n + u(&a["cancelled"]) > 0, "never ran: {a}");
        let by_outcome: u64 = a["outcomes"].as_object().unwrap().values().map(u).sum();
        assert_eq!(by_outcome, n, "{a}");
        assert_eq!(u(&a["expected"]) + u(&a["unexpected"]), n, "{a}");
        total += n;
        unexpected += u(&a["unexpected"]);
        cancelled += u(&a["cancelled"]);
    }
    assert_eq!(total, attacks);
    assert_eq!(u(&h["unexpected_total"]), unexpected);
    assert_eq!(u(&h["cancelled_at_end"]), cancelled);
    assert_eq!(u(&h["started"]), attacks + cancelled);
    let all: u64 = h["by_outcome"].as_object().unwrap().values().map(u).sum();
    assert_eq!(all, attacks);
    let listed: u64 = h["unexpected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| u(&x["count"]))
        .sum();
    assert_eq!(listed, unexpected);
    // the stand-in is not Herald: it accepts topics Herald refuses, so there are unexpected
    // outcomes, and they are in the verdict
    assert!(unexpected > 0);
    assert_eq!(r["verdict"]["ok"], false);
    let problems = r["verdict"]["problems"].to_string();
    assert!(problems.contains("unexpected outcome"), "{problems}");
    // health checks of the admin listener all passed
    let health = &h["health"];
    assert!(u(&health["checks"]) >= 1, "{health}");
    assert_eq!(u(&health["ok"]), u(&health["checks"]), "{health}");
    // the good clients got everything
    let g = &h["good_clients"];
    assert_eq!(u(&g["connected"]), 10, "{g}");
    assert_eq!(g["unharmed"], true, "{g}");
    assert_eq!(g["delivery_ratio"].as_f64(), Some(1.0));
    assert_complete_delivery_counts(&r);
    // memory of the sampled server over the attack phase
    let m = &h["memory"][0];
    assert!(u(&m["samples"]) >= 1, "{m}");
    // The sampled process is this one, in kB: its last sample is near what it holds now.
    let now = own_rss_kb();
    let end = u(&m["rss_end_kb"]);
    assert!(
        end * 2 >= now && end <= now * 2,
        "sampled {end} kB, holds {now} kB: {m}"
    );
    assert!(u(&m["rss_peak_kb"]) >= end, "{m}");
    assert!(
        r["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["attacks_per_sec"].as_f64().unwrap_or(0.0) > 0.0)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("hostile") && stdout.contains("good clients"),
        "{stdout}"
    );
}

/// Delivery of the good clients: nothing missing or duplicated.
fn assert_complete_delivery_counts(r: &Value) {
    let d = &r["delivery"];
    assert_eq!(d["accounted"], true);
    assert!(u(&d["expected"]) > 0, "{d}");
    assert_eq!(u(&d["delivered"]), u(&d["expected"]), "{d}");
    assert_eq!(u(&d["missing"]), 0);
    assert_eq!(u(&d["duplicates"]), 0);
}

#[test]
fn hostile_refuses_bad_command_lines() {
    for bad in [
        vec!["hostile", "--url", "http://10.1.2.3:8080"],
        vec![
            "hostile",
            "--url",
            "http://127.0.0.1:1",
            "--attacks",
            "nonsense",
        ],
        vec![
            "hostile",
            "--url",
            "http://127.0.0.1:1",
            "--attacks",
            "ws_bad_origin",
        ],
    ] {
        let out = run_loadgen(&args(&bad));
        assert_eq!(out.status.code(), Some(64), "{bad:?}");
    }
}

/// The floor server started on free ports: its process and its public and admin addresses
/// (read from the line it prints once both listen).
struct Floor {
    child: std::process::Child,
    addr: String,
    admin: String,
}

impl Floor {
    fn start() -> Self {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_herald-floor-server"))
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start herald-floor-server");
        let mut line = String::new();
        std::io::BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "herald-floor-server: SSE on 127.0.0.1:P, publish on 127.0.0.1:Q"
        let addr = line
            .split(" on ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        let admin = line.split(" on ").nth(2).unwrap().trim();
        Self {
            addr: addr.to_owned(),
            admin: admin.to_owned(),
            child,
        }
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The floor server serves both fan-out workloads the loadgen runs against Herald: SSE, and
/// WebSocket with Herald's subscribe handshake and `message` frames; every message reaches
/// every subscriber once.
#[test]
fn floor_server_serves_sse_and_websocket_subscribers() {
    for workload in ["sse", "ws"] {
        let floor = Floor::start();
        let line = format!(
            "{workload} --url http://{} --publish-url http://{} --conns 30 --topics 1 \
             --publish-rate 20 --duration 2s --drain 2s --server-pid {}",
            floor.addr,
            floor.admin,
            floor.child.id()
        );
        let (r, _) = run_report(&cmd(&line, &[]), &format!("floor-{workload}"));
        assert_complete_delivery(&r, 30, 1);
    }
}
