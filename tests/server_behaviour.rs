//! Server behaviour jsbench relies on, pinned against the real nats-server
//! (2.15.1): if an upgrade changes one of these, the scenarios that assume
//! it must change too.

mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage, stream};

async fn context(server: &jsbench::server::EmbeddedServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    jetstream::new(client)
}

async fn publish_id(js: &jetstream::Context, subject: &str, id: &str) -> (u64, bool) {
    let ack = js
        .send_publish(
            subject.to_string(),
            PublishMessage::build().payload("x".into()).message_id(id),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    (ack.sequence, ack.duplicate)
}

#[tokio::test]
async fn a_repeated_msg_id_inside_the_window_is_flagged_with_the_original_sequence() {
    let server = common::server();
    let js = context(&server).await;
    js.create_stream(stream::Config {
        name: "DEDUP".into(),
        subjects: vec!["dedup".into()],
        duplicate_window: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(publish_id(&js, "dedup", "a").await, (1, false));
    assert_eq!(publish_id(&js, "dedup", "b").await, (2, false));
    assert_eq!(
        publish_id(&js, "dedup", "a").await,
        (1, true),
        "same sequence, flagged"
    );
    let mut s = js.get_stream("DEDUP").await.unwrap();
    assert_eq!(s.info().await.unwrap().state.messages, 2);
}

#[tokio::test]
async fn a_repeated_msg_id_after_the_window_is_stored_again() {
    let server = common::server();
    let js = context(&server).await;
    let window = Duration::from_millis(500);
    js.create_stream(stream::Config {
        name: "LATE".into(),
        subjects: vec!["late".into()],
        duplicate_window: window,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(publish_id(&js, "late", "a").await, (1, false));
    let sent = Instant::now();
    // Probe the boundary: how long after the first publish does the same id
    // become new again? jsbench's late retries wait longer than this.
    let mut stored_after = None;
    while sent.elapsed() < window * 4 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let elapsed = sent.elapsed();
        let (seq, duplicate) = publish_id(&js, "late", "a").await;
        if !duplicate {
            assert_eq!(seq, 2, "stored as a new message");
            stored_after = Some(elapsed);
            break;
        }
        assert!(
            elapsed < window + Duration::from_millis(400),
            "still a duplicate at {elapsed:?}"
        );
    }
    let stored_after = stored_after.expect("the id expired within four windows");
    assert!(stored_after >= window, "expired early, at {stored_after:?}");
    eprintln!("a 500 ms duplicate window expired after {stored_after:?}");
}
