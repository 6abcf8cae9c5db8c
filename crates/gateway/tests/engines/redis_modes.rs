//! Redis over TLS with an ACL user and a client certificate, Sentinel with a failover, and
//! Redis Cluster with a master failover.

use super::*;

// ----------------------------------------------------------------------------- Redis TLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_an_acl_user_and_a_client_certificate() {
    let Some(url) = engine("HERALD_TEST_REDIS_TLS_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("tls");
    let node = |id: &str| {
        let mut c = redis_node(RedisMode::Single, &url, &p, id);
        tls_files(&mut c).unwrap();
        c
    };
    let nodes = start_three([node("t1"), node("t2"), node("t3")]).await;
    three_nodes_fan_out_and_resume(&nodes, "secure").await;
    // Presence goes over the same TLS connection settings.
    presence_sees_three_nodes(&nodes).await;
    stop_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_the_credentials_or_the_certificate_keeps_the_node_not_ready_and_says_why() {
    let Some(url) = engine("HERALD_TEST_REDIS_TLS_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("tls-bad");
    // A wrong password for the ACL user.
    let wrong = url.replace("herald-redis-secret", "not-the-password");
    assert_ne!(wrong, url);
    let mut config = redis_node(RedisMode::Single, &wrong, &p, "bad-pass");
    tls_files(&mut config).unwrap();
    let gw = spawn_gateway(config).await;
    let admin = gw.admin_addr;
    eventually(WAIT, || async move {
        let resp = get(format!("http://{admin}/readyz"), &[]).await;
        resp.status() == 503
            && resp
                .text()
                .await
                .unwrap()
                .to_lowercase()
                .contains("authentication failed")
    })
    .await;
    let (_, body) = readyz(&gw).await;
    assert!(body.starts_with("redis: not ready:"), "{body}");
    assert!(!body.contains("not-the-password"), "{body}");
    gw.stop().await.unwrap();

    // No client certificate, where the server requires one.
    let mut config = redis_node(RedisMode::Single, &url, &p, "no-cert");
    config.cluster.redis_ca_file = Some(engine("HERALD_TEST_TLS_CA").unwrap().into());
    let gw = spawn_gateway(config).await;
    let gw_ref = &gw;
    eventually(WAIT, || async move {
        let (status, body) = readyz(gw_ref).await;
        status == 503 && body.starts_with("redis: not ready: not connected")
    })
    .await;
    // It stays so: two more attempts, and the server never lets it in.
    let reconnects = r#"herald_bridge_reconnects_total{bridge="redis"}"#;
    let before = metric(&gw, reconnects).await;
    eventually(WAIT, || async {
        metric(&gw, reconnects).await >= before + 2.0
    })
    .await;
    assert_eq!(readyz(&gw).await.0, 503);
    gw.stop().await.unwrap();
}

// ----------------------------------------------------------------------------- Sentinel

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_three_nodes_and_a_failover_lose_nothing_redis_kept() {
    let Some(url) = engine("HERALD_TEST_REDIS_SENTINEL_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("sentinel");
    let node = |id: &str| redis_node(RedisMode::Sentinel, &url, &p, id);
    let nodes = start_three([node("s1"), node("s2"), node("s3")]).await;
    three_nodes_fan_out_and_resume(&nodes, "watched").await;
    presence_sees_three_nodes(&nodes).await;

    let [a, b, c] = &nodes;
    let mut sse = SseClient::connect(a, "topic=fo", None).await;
    sse.next_block().await.unwrap();
    publish(b, "fo", json!("before")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("before")
    );
    let last = sse.last_event_id.clone().unwrap();
    publish(b, "fo", json!("kept")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("kept")
    );

    // Which server is the master now (a previous run of this test may have failed over).
    let master = sentinel_master(&url).await;
    let (dead, alive) = if master == engine_port("s-master") {
        ("s-master", "s-replica")
    } else {
        ("s-replica", "s-master")
    };
    engines(&["kill-node", dead]);
    let revive = Revive(dead.to_string());
    for node in &nodes {
        wait_status(node, 503, FAILOVER).await;
    }
    // The sentinels promote the replica; the nodes find it and follow the streams again.
    for node in &nodes {
        wait_status(node, 200, FAILOVER).await;
    }
    assert_eq!(sentinel_master(&url).await, engine_port(alive));
    // What the old master had replicated survived: resuming from before it is exact.
    after_failover(c, &mut sse, &last).await;
    // The old master comes back (as a replica of the new one) for the tests after this one.
    drop(revive);
    stop_all(nodes).await;
}

/// After a failover: a publish on `c` reaches the live stream `sse`, and a client resuming
/// from `last` (taken before the failover) gets exactly what the old master had replicated
/// ("kept") and what came after, with no loss signal.
async fn after_failover(c: &Gateway, sse: &mut SseClient, last: &str) {
    publish(c, "fo", json!("after")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("after")
    );
    let mut back = SseClient::connect(c, "topic=fo", Some(last)).await;
    for want in ["kept", "after"] {
        let e = back.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        assert_eq!(e.data.as_deref(), Some(want));
    }
}

/// Redis replicates after answering: without `redis_wait_replicas` a publish is answered 200
/// while no replica holds it (a master dying then takes it along, and the promoted replica
/// never had it: the silent gap `herald-loadgen chaos` found on `redis_failover`). With
/// `redis_wait_replicas = 1` the same publish is answered 503, and 200 again once the
/// replica is back: an answered publish is on a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_publish_waits_for_a_replica_when_asked() {
    let Some(url) = engine("HERALD_TEST_REDIS_SENTINEL_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("wait");
    let mut config = redis_node(RedisMode::Sentinel, &url, &p, "w1");
    config.cluster.redis_wait_replicas = 1;
    config.cluster.redis_wait_timeout = Duration::from_millis(300);
    let waits = spawn_ready(config).await;
    let asap = spawn_ready(redis_node(RedisMode::Sentinel, &url, &p, "w2")).await;
    let status = |gw: &Gateway, n: u32| {
        let admin = gw.admin_addr;
        async move {
            let body = json!({ "topic": "w", "data": n });
            post_json(format!("http://{admin}/v1/publish"), &[], &body)
                .await
                .status()
                .as_u16()
        }
    };
    // the replica confirms (it may still be syncing after the failover test)
    let waits_ref = &waits;
    eventually(
        FAILOVER,
        || async move { status(waits_ref, 1).await == 200 },
    )
    .await;

    let replica = if sentinel_master(&url).await == engine_port("s-master") {
        "s-replica"
    } else {
        "s-master"
    };
    engines(&["kill-node", replica]);
    let revive = Revive(replica.to_string());
    // The master alone: answered at once by the default node, refused by the waiting one.
    assert_eq!(status(&asap, 2).await, 200);
    let refused = post_json(
        format!("http://{}/v1/publish", waits.admin_addr),
        &[],
        &json!({ "topic": "w", "data": 3 }),
    )
    .await;
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "bridge_unavailable", "{body}");

    drop(revive);
    eventually(
        FAILOVER,
        || async move { status(waits_ref, 4).await == 200 },
    )
    .await;
    stop_all([waits, asap]).await;
}

fn engine_port(name: &str) -> u16 {
    let dir = std::env::var("HERALD_ENGINES_DIR").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/engines").to_string()
    });
    std::fs::read_to_string(format!("{dir}/rx/{name}/port"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The master's port, as the first sentinel of `url` reports it.
async fn sentinel_master(url: &str) -> u16 {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let first = rest.split([',', '/']).next().unwrap();
    let client = redis::Client::open(format!("redis://{first}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let master = rest.rsplit('/').next().unwrap();
    let (_, port): (String, String) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query_async(&mut conn)
        .await
        .unwrap();
    port.parse().unwrap()
}

// ----------------------------------------------------------------------------- Cluster

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_spreads_streams_over_the_masters_and_survives_a_master_failover() {
    let Some(url) = engine("HERALD_TEST_REDIS_CLUSTER_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let shards = 8;
    // Every shard stream and its epoch share a slot. Which masters the shards land on is the
    // hash's business: take a prefix whose shards cover all three masters, so that the nodes
    // below read from every master.
    let p = loop {
        let p = unique("rc");
        let mut masters = std::collections::BTreeSet::new();
        for shard in 0..shards {
            let stream = format!("{{{p}:{shard}}}:stream");
            let epoch = format!("{{{p}:{shard}}}:epoch");
            let owner = engines(&["cluster-master-of", &stream]);
            assert_eq!(engines(&["cluster-master-of", &epoch]), owner);
            masters.insert(owner);
        }
        if masters.len() == 3 {
            break p;
        }
    };
    let ca = engine("HERALD_TEST_TLS_CA").unwrap();
    let node = |id: &str| {
        let mut c = redis_node(RedisMode::Cluster, &url, &p, id);
        c.cluster.redis_shards = shards;
        // The test cluster speaks TLS only, like ElastiCache with in-transit encryption.
        c.cluster.redis_ca_file = Some(ca.clone().into());
        c
    };
    let nodes = start_three([node("c1"), node("c2"), node("c3")]).await;
    three_nodes_fan_out_and_resume(&nodes, "sharded").await;
    // Presence keys share one hash tag: its pipelines work on a Redis Cluster.
    presence_sees_three_nodes(&nodes).await;

    // A message on each of many topics: every node delivers each, whichever master holds it.
    let [a, b, c] = &nodes;
    let topics: Vec<String> = (0..12).map(|i| format!("spread{i}")).collect();
    let query = topics
        .iter()
        .map(|t| format!("topic={t}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut on_c = SseClient::connect(c, &query, None).await;
    on_c.next_block().await.unwrap();
    for t in &topics {
        publish(a, t, json!(t)).await;
    }
    let mut got: Vec<String> = Vec::new();
    while got.len() < topics.len() {
        got.push(on_c.next_event().await.unwrap().data.unwrap());
    }
    got.sort();
    let mut want = topics.clone();
    want.sort();
    assert_eq!(got, want);

    // Kill the master of topic "fo"'s stream; its replica takes over.
    let shard = herald_gateway::shard_of("fo", shards);
    let victim = engines(&["cluster-master-of", &format!("{{{p}:{shard}}}:stream")]);
    let mut sse = SseClient::connect(b, "topic=fo", None).await;
    sse.next_block().await.unwrap();
    publish(a, "fo", json!("before")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("before")
    );
    let last = sse.last_event_id.clone().unwrap();
    publish(a, "fo", json!("kept")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("kept")
    );
    // Let the replica receive the last write before its master dies.
    let seed = url.split(',').next().unwrap().to_string();
    wait_replicated(&seed, &ca).await;
    engines(&["kill-node", &victim]);
    let revive = Revive(victim.clone());
    // The cluster promotes the replica. The nodes may or may not be seen not ready while it
    // does (the client can follow a fast failover by itself): what counts is that they are
    // ready afterwards and nothing the old master had replicated is lost.
    let stream = format!("{{{p}:{shard}}}:stream");
    // While no master serves the slot, the script says so and fails: not promoted yet.
    eventually(FAILOVER, || async {
        try_engines(&["cluster-master-of", &stream]).is_ok_and(|m| m != victim)
    })
    .await;
    for node in &nodes {
        wait_status(node, 200, FAILOVER).await;
    }
    after_failover(c, &mut sse, &last).await;
    // The old master rejoins as a replica.
    drop(revive);
    stop_all(nodes).await;
}

/// Waits until every master's replicas have acknowledged its writes (`WAIT 1` on each).
async fn wait_replicated(seed: &str, ca: &str) {
    use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
    let client = redis::cluster::ClusterClient::builder(vec![seed])
        .certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca).unwrap()),
        })
        .build()
        .unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    conn.route_command(
        redis::cmd("WAIT").arg(1).arg(2000).clone(),
        RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        )),
    )
    .await
    .unwrap();
}

/// Open files of this process (the test's nodes live in it).
fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_wildcard_subscribers_cost_one_live_connection_per_master() {
    let Some(url) = engine("HERALD_TEST_REDIS_CLUSTER_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("rcw");
    let ca = engine("HERALD_TEST_TLS_CA").unwrap();
    let node = |id: &str| {
        let mut c = redis_node(RedisMode::Cluster, &url, &p, id);
        // Every partition, as a production node has them: a pattern follows all 16,384.
        c.cluster.redis_shards = herald_gateway::Config::default().cluster.redis_shards;
        c.cluster.redis_ca_file = Some(ca.clone().into());
        c.cluster.backfill_timeout = Duration::from_secs(60);
        c
    };
    let (a, b) = (spawn_ready(node("w1")).await, spawn_ready(node("w2")).await);
    let before = open_files();
    // One anonymous wildcard subscriber per node.
    let mut subscribers = Vec::new();
    for gw in [&a, &b] {
        let mut sse = SseClient::connect(gw, "topic=wild.*", None).await;
        sse.next_block().await.unwrap();
        subscribers.push(sse);
    }
    let partitions: f64 = metric(&a, r#"herald_bridge_groups_followed{bridge="redis"}"#).await;
    assert_eq!(partitions, 16_384.0, "a pattern follows every partition");
    // Per node, one live connection per master (3 here), not one per partition (16,384): what
    // else the process opens meanwhile (the test's HTTP connections, other tasks) stays well
    // under the bound.
    let grown = open_files().saturating_sub(before);
    assert!(
        grown <= 64,
        "following every partition opened {grown} files: a node holds one live connection per master"
    );
    // Every message arrives, once, on both nodes.
    let topics: Vec<String> = (0..20).map(|i| format!("wild.{i}")).collect();
    for (i, t) in topics.iter().enumerate() {
        let via = if i % 2 == 0 { &a } else { &b };
        publish(via, t, json!(t)).await;
    }
    for sse in &mut subscribers {
        let mut got: Vec<String> = Vec::new();
        while got.len() < topics.len() {
            got.push(sse.next_event().await.unwrap().data.unwrap());
        }
        got.sort();
        let mut want = topics.clone();
        want.sort();
        assert_eq!(got, want, "every message, once");
    }
    // Publishing adds each node's publishing connection per master and the HTTP ones.
    let grown = open_files().saturating_sub(before);
    assert!(grown <= 64, "{grown} files more after publishing");
    stop_all([a, b]).await;
}
