//! The direct consumer against a real server: it reads a stream with every
//! invariant the ack scenario checks, the server agreeing it acked each
//! delivery (nothing ack-pending, the ack floor at the last message); a
//! direct consumer told to skip acks leaves exactly those pending, and one
//! whose server goes away ends with an error naming it.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use common::{assert_all_passed, run_profile};
use jsbench::connect::ConnectSettings;
use jsbench::consume::direct::{self, Sabotage};
use jsbench::consume::{ConsumerConfig, ConsumerProgress, ConsumerReport};
use jsbench::profile::{AckPolicy, ConsumerClient, ConsumerPlan};
use jsbench::record::ledger::Event;
use jsbench::record::stamp::{STAMP_LEN, Stamp};
use tokio_util::sync::CancellationToken;

const MESSAGES: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ack_scenario_reads_with_the_direct_client_where_it_applies() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "direct",
        "[[scenario]]\nkind = \"ack\"\nmessages = 2000\nacks = [\"explicit\", \"all\", \"none\", \"double\"]\n\
         reads = [\"pull\"]\nreference = []\n\
         [scenario.consumer]\nack_every = 50\nbatch = 100\n",
    )
    .await;
    // Every invariant, nothing_pending (the server's num_ack_pending 0)
    // among them, held with the direct client reading.
    assert_all_passed(&summary);
    for (_, v) in summary.variants() {
        assert_eq!(v.ledger.delivered, 2000, "{}", v.name);
        let client = v.params.get("consumer_client").and_then(|c| c.as_str());
        // Double acks are confirmed by the server: async-nats keeps them.
        let expected = if v.name.contains("double") {
            "async-nats"
        } else {
            "direct"
        };
        assert_eq!(client, Some(expected), "{}", v.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_direct_where_it_cannot_apply_fails_the_variant_naming_the_key() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "direct-double",
        "[[scenario]]\nkind = \"ack\"\nmessages = 200\nacks = [\"double\"]\n\
         reads = [\"pull\"]\nreference = []\n\
         [scenario.consumer]\nclient = \"direct\"\nbatch = 100\n",
    )
    .await;
    let (_, v) = summary.variants().next().unwrap();
    assert!(!v.passed, "{}", v.name);
    let said = format!("{:?} {:?}", v.error, v.warnings);
    assert!(
        said.contains("scenario.consumer.client = \\\"direct\\\"") && said.contains("double"),
        "{said}"
    );
}

/// A stream of stamped messages and a durable over it.
async fn filled(server: &jsbench::server::EmbeddedServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    let stream = js
        .create_stream(stream::Config {
            name: "DIRECT".into(),
            subjects: vec!["direct.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for n in 1..=MESSAGES {
        let mut payload = vec![0u8; STAMP_LEN + 8];
        Stamp {
            intended_ns: 1,
            sent_ns: 1,
            publisher: 0,
            publisher_seq: n,
        }
        .write(&mut payload);
        js.publish("direct.0", payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    stream
        .create_consumer(pull::Config {
            durable_name: Some("D".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    js
}

fn config() -> ConsumerConfig {
    let mut plan = ConsumerPlan::simple();
    plan.ack = AckPolicy::Explicit;
    plan.batch = 64;
    plan.client = ConsumerClient::Direct;
    // The per-second timeline counts from now.
    let origin = jsbench::record::clock::now_ns();
    ConsumerConfig {
        plan,
        ..ConsumerConfig::acking_all("DIRECT", MESSAGES, origin)
    }
}

/// Runs a direct consumer until it has received every message (or 20 s
/// have passed), then stops it.
async fn read_all(server: &jsbench::server::EmbeddedServer, sabotage: Sabotage) -> ConsumerReport {
    let settings = ConnectSettings::new(server.url(), Duration::from_secs(5)).unwrap();
    let progress = Arc::new(ConsumerProgress::default());
    let stop = CancellationToken::new();
    let task = jsbench::system::runtimes::consume().spawn(direct::run_with(
        settings,
        config(),
        progress.clone(),
        stop.clone(),
        sabotage,
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while progress.received.load(Ordering::Relaxed) < MESSAGES
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Acks written before the stop reach the server before it is asked.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    task.await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_saw_every_ack_the_direct_consumer_counted() {
    let server = common::server();
    let js = filled(&server).await;
    let report = read_all(&server, Sabotage::default()).await;
    assert_eq!(report.received, MESSAGES);
    assert_eq!(report.client, "direct");
    assert_eq!(report.first_error, None);
    let counts = report.ledger.counts();
    assert_eq!((counts.delivered, counts.acked), (MESSAGES, MESSAGES));
    let mut consumer: jetstream::consumer::PullConsumer =
        js.get_consumer_from_stream("D", "DIRECT").await.unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(info.num_pending, 0);
    assert_eq!(info.ack_floor.stream_sequence, MESSAGES);
    assert_eq!(info.num_redelivered, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_the_direct_consumer_skipped_are_neither_counted_nor_seen() {
    let server = common::server();
    let js = filled(&server).await;
    let skipped = 40;
    let report = read_all(
        &server,
        Sabotage {
            acks_at_most: Some(MESSAGES - skipped),
        },
    )
    .await;
    let counts = report.ledger.counts();
    // jsbench's own count, which "every delivery acked" compares: short.
    assert_eq!(counts.delivered, MESSAGES);
    assert_eq!(counts.acked, MESSAGES - skipped);
    assert_eq!(report.ledger.count(MESSAGES, Event::Acked), 0);
    let mut consumer: jetstream::consumer::PullConsumer =
        js.get_consumer_from_stream("D", "DIRECT").await.unwrap();
    let info = consumer.info().await.unwrap();
    // The server agrees: exactly those are pending, the floor below them.
    assert_eq!(info.num_ack_pending as u64, skipped);
    assert_eq!(info.ack_floor.stream_sequence, MESSAGES - skipped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_ends_the_direct_consumer_with_an_error_naming_it() {
    let mut server = common::server();
    filled(&server).await;
    let settings = ConnectSettings::new(server.url(), Duration::from_secs(5)).unwrap();
    let progress = Arc::new(ConsumerProgress::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn(direct::run(settings, config(), progress.clone(), stop));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while progress.received.load(Ordering::Relaxed) < MESSAGES
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop();
    let report = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the consumer ends on its own once the server is gone")
        .unwrap()
        .unwrap();
    let error = report.first_error.expect("the loss is reported");
    assert!(
        error.contains("the direct consumer's connection failed"),
        "{error}"
    );
    assert!(report.stream_errors >= 1);
}
