use super::*;
use crate::cli::{Cli, Command};
use clap::Parser;

fn sse(args: &[&str]) -> Result<RunPlan, PlanError> {
    let mut v = vec!["herald-loadgen", "sse"];
    v.extend_from_slice(args);
    match Cli::try_parse_from(v).unwrap().command {
        Command::Sse(a) => sse_plan(&a),
        _ => unreachable!(),
    }
}

fn hostile(args: &[&str]) -> Result<RunPlan, PlanError> {
    let mut v = vec!["herald-loadgen", "hostile"];
    v.extend_from_slice(args);
    match Cli::try_parse_from(v).unwrap().command {
        Command::Hostile(a) => hostile_plan(&a),
        _ => unreachable!(),
    }
}

#[test]
fn hostile_plan_spreads_attackers_and_checks_flags() {
    let p = hostile(&[
        "--url",
        "http://127.0.0.1:8080",
        "--good-conns",
        "0",
        "--health-url",
        "http://127.0.0.1:9090",
    ])
    .unwrap();
    assert_eq!(p.conns, 0);
    assert_eq!(p.command, "hostile");
    let h = p.hostile.unwrap();
    assert_eq!(h.conns, 200);
    assert_eq!(h.max_slow, 20);
    assert_eq!(h.source_ips.len(), 64);
    assert_eq!(h.source_ips[0], "127.0.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(h.health.unwrap().path_and_query, "/healthz");
    // the good clients keep their own address
    assert_eq!(p.source_ips, vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
    assert!(hostile(&["--url", "http://10.0.0.1:8080"]).is_err());
    assert!(
        hostile(&[
            "--url",
            "http://127.0.0.1:8080",
            "--good-conns",
            "0",
            "--publish-url",
            "http://127.0.0.1:9090"
        ])
        .is_err()
    );
    assert!(
        hostile(&[
            "--url",
            "http://127.0.0.1:8080",
            "--attacks",
            "ws_bad_origin"
        ])
        .is_err()
    );
    let p = hostile(&[
        "--url",
        "http://127.0.0.1:8080",
        "--attacks",
        "ws_bad_origin",
        "--origin-forbidden",
        "https://evil.example",
        "--good-conns",
        "5",
    ])
    .unwrap();
    assert_eq!(p.conns, 5);
    assert_eq!(p.hostile.unwrap().attacks.len(), 1);
    // the admin listener and the soak's hooks open their attacks
    assert!(
        hostile(&[
            "--url",
            "http://127.0.0.1:8080",
            "--attacks",
            "admin_cross_site"
        ])
        .is_err()
    );
    let p = hostile(&[
        "--url",
        "http://127.0.0.1:8080",
        "--admin-url",
        "http://127.0.0.1:9090",
        "--hooked",
    ])
    .unwrap();
    let h = p.hostile.unwrap();
    assert_eq!(h.admin.unwrap().addr.port(), 9090);
    assert!(
        h.attacks
            .contains(&crate::hostile::attack::Attack::PatternPastHook)
    );
    assert!(
        hostile(&[
            "--url",
            "http://127.0.0.1:8080",
            "--admin-url",
            "http://10.0.0.1:9090"
        ])
        .is_err()
    );
}

#[test]
fn refuses_non_loopback_targets() {
    let e = sse(&["--url", "http://10.0.0.1:8080"]).unwrap_err();
    assert!(e.0.contains("non-loopback"), "{e}");
    let e = sse(&[
        "--url",
        "http://127.0.0.1:8080",
        "--publish-url",
        "http://192.168.1.1:9090",
    ])
    .unwrap_err();
    assert!(e.0.contains("non-loopback"), "{e}");
    assert!(sse(&["--url", "http://10.0.0.1:8080", "--allow-non-loopback"]).is_ok());
}

#[test]
fn splits_work_over_processes_past_the_socket_budget() {
    let p = sse(&[
        "--url",
        "http://127.0.0.1:8080",
        "--url",
        "http://127.0.0.1:8081",
        "--conns",
        "120000",
    ])
    .unwrap();
    assert_eq!(p.workers, 7);
    assert!(p.processes);
    assert_eq!(p.source_ips.len(), 6);
    let specs = p.worker_specs();
    assert_eq!(specs.iter().map(|s| s.conns).sum::<u64>(), 120_000);
    assert_eq!(specs[1].first_conn, specs[0].conns);
    assert!(specs.iter().all(|s| s.conns <= 18_000));
    let small = sse(&["--url", "http://127.0.0.1:8080", "--conns", "500"]).unwrap();
    assert_eq!((small.workers, small.processes), (1, false));
    let forced = sse(&[
        "--url",
        "http://127.0.0.1:8080",
        "--conns",
        "10",
        "--workers",
        "2",
    ])
    .unwrap();
    assert_eq!((forced.workers, forced.processes), (2, true));
}

#[test]
fn validates_topics_and_rates() {
    assert!(
        sse(&[
            "--url",
            "http://127.0.0.1:1",
            "--topic-prefix",
            "bad prefix"
        ])
        .is_err()
    );
    assert!(sse(&["--url", "http://127.0.0.1:1", "--conns", "0"]).is_err());
    assert!(
        sse(&[
            "--url",
            "http://127.0.0.1:1",
            "--publish-url",
            "http://127.0.0.1:2",
            "--publish-rate",
            "0"
        ])
        .is_err()
    );
    let p = sse(&[
        "--url",
        "http://127.0.0.1:1",
        "--publish-url",
        "http://127.0.0.1:2",
        "--topics",
        "3",
    ])
    .unwrap();
    let pc = p.publisher.unwrap();
    assert_eq!(pc.topics, vec!["load-0", "load-1", "load-2"]);
    assert_eq!(pc.targets[0].path_and_query, "/v1/publish");
}
