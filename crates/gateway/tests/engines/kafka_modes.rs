//! Kafka over SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SSL with a client
//! certificate.

use super::*;

struct SaslBroker {
    brokers: String,
    plain: String,
    user: String,
    password: String,
    ca: String,
}

fn sasl_broker() -> Option<SaslBroker> {
    Some(SaslBroker {
        brokers: engine("HERALD_TEST_KAFKA_SASL_BROKERS")?,
        plain: engine("HERALD_TEST_KAFKA_BROKERS")?,
        user: engine("HERALD_TEST_KAFKA_USER")?,
        password: engine("HERALD_TEST_KAFKA_PASSWORD")?,
        ca: engine("HERALD_TEST_TLS_CA")?,
    })
}

impl SaslBroker {
    fn properties(&self, mechanism: &str, password: &str) -> BTreeMap<String, String> {
        [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", mechanism),
            ("sasl.username", self.user.as_str()),
            ("sasl.password", password),
            ("ssl.ca.location", self.ca.as_str()),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
    }

    fn node(&self, kt: &str, node: &str, mechanism: &str) -> Config {
        let mut config = test_config();
        config.cluster.kafka_brokers = Some(self.brokers.clone());
        config.cluster.kafka_topics = vec![kt.to_string()];
        config.cluster.node_id = node.to_string();
        config.cluster.kafka_properties = self.properties(mechanism, &self.password);
        config
    }

    /// A client of the plaintext listener of the same broker (the test's own side).
    fn plain_client(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.plain);
        c
    }

    async fn create_topic(&self, name: &str) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            self.plain_client().create().unwrap();
        for r in admin
            .create_topics(
                &[NewTopic::new(name, 2, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            )
            .await
            .unwrap()
        {
            r.unwrap();
        }
    }

    async fn produce(&self, kt: &str, topic: &str, value: serde_json::Value) {
        use rdkafka::message::{Header, OwnedHeaders};
        use rdkafka::producer::{FutureProducer, FutureRecord};
        let producer: FutureProducer = self
            .plain_client()
            .set("message.timeout.ms", "60000")
            .create()
            .unwrap();
        let value = value.to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: "herald-topic",
            value: Some(topic),
        });
        producer
            .send(
                FutureRecord::to(kt)
                    .key(topic)
                    .payload(&value)
                    .headers(headers),
                Duration::from_secs(60),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

/// Ingest (a record produced by another service reaches subscribers on two nodes with one
/// id) and publishing through the HTTP API (Herald's producer) over SASL_SSL.
async fn kafka_sasl_ingest_and_publish(mechanism: &str) {
    let Some(broker) = sasl_broker() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique(&format!("sasl-{}", mechanism.to_lowercase()));
    broker.create_topic(&kt).await;
    let a = spawn_ready(broker.node(&kt, &unique("a"), mechanism)).await;
    let b = spawn_ready(broker.node(&kt, &unique("b"), mechanism)).await;
    let mut sse = SseClient::connect(&a, "topic=orders", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &["orders"]).await;
    broker.produce(&kt, "orders", json!({"order": 1})).await;
    let e = sse.next_event().await.unwrap();
    assert_eq!(e.data.as_deref(), Some(r#"{"order":1}"#));
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        e.id.unwrap(),
        format!("orders={}", frame["id"].as_str().unwrap())
    );
    let id = publish(&b, "orders", json!("via http")).await;
    let e = sse.next_event().await.unwrap();
    assert_eq!(e.data.as_deref(), Some("via http"));
    assert_eq!(e.id.unwrap(), format!("orders={id}"));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_sasl_ssl_with_plain() {
    kafka_sasl_ingest_and_publish("PLAIN").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_sasl_ssl_with_scram_sha_256() {
    kafka_sasl_ingest_and_publish("SCRAM-SHA-256").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_sasl_ssl_with_scram_sha_512() {
    kafka_sasl_ingest_and_publish("SCRAM-SHA-512").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_ssl_with_a_client_certificate() {
    let (Some(brokers), Some(broker)) = (engine("HERALD_TEST_KAFKA_SSL_BROKERS"), sasl_broker())
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique("mtls");
    broker.create_topic(&kt).await;
    let mut config = test_config();
    config.cluster.kafka_brokers = Some(brokers);
    config.cluster.kafka_topics = vec![kt.clone()];
    config.cluster.kafka_properties = [
        ("security.protocol", "SSL".to_string()),
        ("ssl.ca.location", broker.ca.clone()),
        (
            "ssl.certificate.location",
            engine("HERALD_TEST_TLS_CLIENT_CERT").unwrap(),
        ),
        (
            "ssl.key.location",
            engine("HERALD_TEST_TLS_CLIENT_KEY").unwrap(),
        ),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .into();
    let gw = spawn_ready(config).await;
    let mut sse = SseClient::connect(&gw, "topic=m", None).await;
    sse.next_block().await.unwrap();
    broker.produce(&kt, "m", json!("mutual")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("mutual")
    );
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_upstream_events_and_a_broker_restart_over_sasl_ssl() {
    use rdkafka::Message as _;
    use rdkafka::consumer::{Consumer as _, StreamConsumer};
    let Some(broker) = sasl_broker() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique("sasl-restart");
    let up = unique("sasl-upstream");
    broker.create_topic(&kt).await;
    broker.create_topic(&up).await;
    let mut config = broker.node(&kt, &unique("node"), "SCRAM-SHA-512");
    config.cluster.kafka_upstream_topic = Some(up.clone());
    config.sse.heartbeat = Duration::from_millis(200);
    let gw = spawn_ready(config).await;
    let mut sse = SseClient::connect(&gw, "topic=k", None).await;
    sse.next_block().await.unwrap();
    // The SSE connection was produced upstream over SASL_SSL.
    let consumer: StreamConsumer = broker
        .plain_client()
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&up]).unwrap();
    let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
        .await
        .expect("an upstream record")
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
    assert_eq!(value["transport"], "sse");

    broker.produce(&kt, "k", json!(1)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("1"));
    engines(&["kill-kafka"]);
    wait_status(&gw, 503, Duration::from_secs(30)).await;
    engines(&["start-kafka"]);
    wait_status(&gw, 200, Duration::from_secs(60)).await;
    broker.produce(&kt, "k", json!(2)).await;
    broker.produce(&kt, "k", json!(3)).await;
    for want in ["2", "3"] {
        assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some(want));
    }
    gw.stop().await.unwrap();
}

/// Wrong credentials, given through the environment twins of `cluster.kafka_properties`:
/// the `herald` process says why in its log and in `/readyz`, and never prints the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_wrong_credentials_make_the_node_not_ready_with_a_clear_reason() {
    use std::io::BufRead as _;
    let Some(broker) = sasl_broker() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique("sasl-wrong");
    broker.create_topic(&kt).await;
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (public, admin) = (free(), free());
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["--listen", &public.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .args(["--kafka-brokers", &broker.brokers, "--kafka-topics", &kt])
        .args(["--log-format", "text"])
        .env_remove("RUST_LOG")
        .env("HERALD_KAFKA_PROPERTIES_SECURITY_PROTOCOL", "SASL_SSL")
        .env("HERALD_KAFKA_PROPERTIES_SASL_MECHANISMS", "SCRAM-SHA-256")
        .env("HERALD_KAFKA_PROPERTIES_SASL_USERNAME", &broker.user)
        .env("HERALD_KAFKA_PROPERTIES_SASL_PASSWORD", "wrong-pass-4711")
        .env("HERALD_KAFKA_PROPERTIES_SSL_CA_LOCATION", &broker.ca)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    for pipe in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut log = Vec::new();
    while !log
        .iter()
        .any(|l: &String| l.contains("Authentication failed"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => log.push(line),
            Err(_) => panic!("no authentication error logged: {log:#?}"),
        }
    }
    let url = format!("http://{admin}/readyz");
    eventually(WAIT, || async {
        let resp = get(&url, &[]).await;
        let status = resp.status();
        let body = resp.text().await.unwrap();
        status == 503
            && body.starts_with("kafka: not ready: ")
            && body.contains("Authentication failed")
    })
    .await;
    let body = get(&url, &[]).await.text().await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    while let Ok(line) = rx.try_recv() {
        log.push(line);
    }
    assert!(
        !log.iter().any(|l| l.contains("wrong-pass-4711")),
        "the password was logged"
    );
    assert!(!body.contains("wrong-pass-4711"));
}
