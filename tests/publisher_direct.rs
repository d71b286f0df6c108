//! The direct publisher (the sending thread writes its own frames, PubAcks
//! read in batches) against a real server: a run holds every invariant and
//! says which client published; a PubAck lost on the way is reported as a
//! missing send of the publisher that lost it, never a pass.

mod common;

use std::time::Duration;

use jsbench::connect::{ConnectSettings, ConnectionFlags};
use jsbench::load::{Publisher, PublisherConfig, RetryPlan, Timing};
use jsbench::profile::{MsgId, PublishClient, SizePlan};
use jsbench::record::clock;
use jsbench::record::schedule::Schedule;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_publisher_holds_every_invariant_and_says_so() {
    let server = common::server();
    for (client, expected) in [
        ("direct", "direct"),
        ("auto", "direct"),
        ("async-nats", "async-nats"),
    ] {
        let extra = format!("msg_id = \"unique\"\nclient = \"{client}\"\n");
        let body = common::latency_body("[300]", "1s", "300ms", &extra);
        let summary = common::run_profile(&server, &format!("direct-{client}"), &body).await;
        common::assert_all_passed(&summary);
        for (_, v) in summary.variants() {
            assert_eq!(v.params["publisher_client"], expected, "client = {client}");
            let total = 300 * 13 / 10;
            let l = &v.ledger;
            assert_eq!(
                (l.published, l.persisted, l.acked),
                (total, total, total),
                "{client}"
            );
            assert_eq!(
                (l.lost, l.publish_errors, l.duplicates),
                (0, 0, 0),
                "{client}"
            );
        }
    }
}

fn settings(url: &str) -> ConnectSettings {
    common::connect_settings(ConnectionFlags {
        server: Some(url.to_string()),
        ..Default::default()
    })
}

fn config(window: usize, drop_pub_acks: u64) -> PublisherConfig {
    PublisherConfig {
        subject_stride: 1,
        index: 4,
        subjects: vec!["direct.drop".into()],
        message_size: SizePlan::Fixed(64),
        schedule: Schedule {
            t0_ns: 0,
            total_rate: Some(2_000),
            stride: 1,
            offset: 0,
            total_messages: 200,
            end_ns: u64::MAX,
            arrivals: None,
        },
        window,
        msg_id: MsgId::Unique,
        msg_id_prefix: format!("drop-{window}-{drop_pub_acks}-"),
        headers: vec![("X-Test".into(), "1".into())],
        retries: RetryPlan::default(),
        seed: 1,
        record_from_ns: 0,
        pub_ack_timeout: Duration::from_secs(1),
        timeline_origin_ns: 0,
        resend_after: None,
        wake_every: None,
        client: PublishClient::Direct,
        trace_every: 0,
        trace_prefix: String::new(),
        drop_pub_acks,
    }
}

/// Publishes 200 messages at 2k msg/s through a direct publisher whose
/// reader drops the first `drop` PubAcks; its reports.
async fn publish(
    url: &str,
    window: usize,
    drop: u64,
) -> (jsbench::load::SendReport, jsbench::load::AckReport) {
    let settings = settings(url);
    let mut publisher = Publisher::start(
        &settings,
        "publisher-4",
        config(window, drop),
        CancellationToken::new(),
    )
    .await
    .expect("a direct publisher starts");
    let t0 = clock::now_ns() + 20_000_000;
    publisher.go(Timing {
        t0_ns: t0,
        record_from_ns: t0,
        end_ns: u64::MAX,
    });
    tokio::time::timeout(Duration::from_secs(20), publisher.finish())
        .await
        .expect("the publisher ends within 20 s")
        .expect("reports")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_pub_ack_is_a_missing_send_of_its_publisher() {
    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "DIRECT_DROP".into(),
        subjects: vec!["direct.>".into()],
        ..Default::default()
    })
    .await
    .expect("a stream");

    // Whole: every send answered, stored once, latency for each.
    let (sends, acks) = publish(server.url(), 1000, 0).await;
    assert_eq!(sends.client, PublishClient::Direct);
    assert_eq!((sends.sent, sends.first_error.as_deref()), (200, None));
    assert_eq!(
        (acks.acked, acks.responses, acks.missing, acks.errors),
        (200, 200, 0, 0),
        "{:?} {:?}",
        acks.first_error,
        sends
    );
    assert_eq!(acks.from_sent.count(), 200);

    // One PubAck lost: the send it answered is missing, in this
    // publisher's report, after the PubAck timeout; nothing else is.
    let (sends, acks) = publish(server.url(), 1000, 1).await;
    assert_eq!(sends.sent, 200);
    let mut stream = js.get_stream("DIRECT_DROP").await.unwrap();
    let stored = stream.info().await.unwrap().state.messages;
    assert_eq!(
        (acks.acked, acks.responses, acks.missing),
        (199, 199, 1),
        "stored {stored}, {:?} gap {}",
        acks.first_error,
        acks.max_gap_ns
    );

    // A window of one (the sync placement, all on the sending thread): the
    // lost PubAck holds the window shut until the sender gives up, stalled.
    let (sends, acks) = publish(server.url(), 1, 1).await;
    assert!(sends.stalled.is_some(), "{sends:?}");
    assert_eq!(acks.responses + acks.missing, sends.sent, "{acks:?}");
    assert!(acks.missing >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_direct_connection_is_an_error_naming_it_never_a_silent_loss() {
    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "DIRECT_LOST".into(),
        subjects: vec!["direct.>".into()],
        ..Default::default()
    })
    .await
    .expect("a stream");
    // 2,000 messages at 2k msg/s; the server dies a quarter of the way.
    let mut config = config(1000, 0);
    config.schedule.total_messages = 2_000;
    let mut publisher = Publisher::start(
        &settings(server.url()),
        "publisher-4",
        config,
        CancellationToken::new(),
    )
    .await
    .expect("a direct publisher starts");
    let t0 = clock::now_ns() + 20_000_000;
    publisher.go(Timing {
        t0_ns: t0,
        record_from_ns: t0,
        end_ns: u64::MAX,
    });
    tokio::time::sleep(Duration::from_millis(270)).await;
    server.kill().expect("the server is killed");
    let (sends, acks) = tokio::time::timeout(Duration::from_secs(20), publisher.finish())
        .await
        .expect("the publisher ends within 20 s")
        .expect("reports");
    let errors = format!("{:?} / {:?}", sends.first_error, acks.first_error);
    assert!(
        errors.contains("publisher 4") && errors.contains("direct connection failed"),
        "{errors}"
    );
    // Whatever was sent and not answered is missing: the counts close.
    assert!(sends.sent < 2_000, "{sends:?}");
    assert_eq!(acks.responses + acks.missing, sends.sent, "{errors}");
    assert!(acks.missing > 0 || sends.stalled.is_some(), "{acks:?}");
}
