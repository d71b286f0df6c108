//! The dead-letter pipeline against a real server: the server rules it
//! relies on (pinned with raw async-nats), then the `dlq` scenario per
//! retention, with a handler restart and advisories of streams that are not
//! jsbench's.

mod common;

use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, stream};
use futures::StreamExt;

async fn context(
    server: &jsbench::server::EmbeddedServer,
) -> (async_nats::Client, jetstream::Context) {
    let client = async_nats::connect(server.url()).await.unwrap();
    (client.clone(), jetstream::new(client))
}

/// A stream of `retention` on `subject` with `n` messages.
async fn stream_with(
    js: &jetstream::Context,
    name: &str,
    retention: stream::RetentionPolicy,
    n: usize,
) -> stream::Stream {
    let s = js
        .create_stream(stream::Config {
            name: name.into(),
            subjects: vec![name.to_lowercase()],
            retention,
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..n {
        js.publish(name.to_lowercase(), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    s
}

async fn durable(s: &stream::Stream, name: &str, max_deliver: i64) -> consumer::PullConsumer {
    s.create_consumer(consumer::pull::Config {
        durable_name: Some(name.into()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_millis(150),
        max_deliver,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Receives `n` deliveries, one pull each, answering each with `answer`
/// (none: ignore).
async fn receive(c: &consumer::PullConsumer, n: usize, answer: Option<AckKind>) {
    for _ in 0..n {
        let m = c
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .unwrap()
            .next()
            .await
            .expect("a delivery within 5 s")
            .unwrap();
        if let Some(kind) = answer {
            m.double_ack_with(kind).await.unwrap();
        }
    }
}

/// Waits, with a pull request outstanding, until the consumer shows
/// nothing pending: the server lets a MaxDeliver'd message go (and sends
/// its advisory) only when it would deliver it again, which needs a pull.
async fn settled(c: &mut consumer::PullConsumer) {
    let mut pull = c
        .batch()
        .max_messages(1)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    for _ in 0..100 {
        let info = c.info().await.unwrap();
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            return;
        }
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), pull.next()).await {
            panic!("delivered while settling: {:?}", m.unwrap().info().unwrap());
        }
    }
    panic!("consumer never settled: {:?}", c.info().await.unwrap());
}

async fn messages(s: &mut stream::Stream) -> u64 {
    s.info().await.unwrap().state.messages
}

#[tokio::test]
async fn a_max_delivered_message_stays_in_a_work_queue_stream_until_deleted() {
    let server = common::server();
    let (_, js) = context(&server).await;
    let mut s = stream_with(&js, "WQMD", stream::RetentionPolicy::WorkQueue, 1).await;
    let mut c = durable(&s, "c", 2).await;
    receive(&c, 2, None).await;
    // Without a pull request the server never gets round to letting the
    // exhausted message go: it stays pending, and no advisory fires.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.info().await.unwrap().num_ack_pending, 1);
    settled(&mut c).await;
    assert_eq!(
        messages(&mut s).await,
        1,
        "MaxDeliver neither acks nor removes"
    );
    let original = s
        .get_raw_message(1)
        .await
        .expect("still readable by sequence");
    assert_eq!(original.payload.as_ref(), b"x");
    assert!(s.delete_message(1).await.unwrap());
    assert_eq!(messages(&mut s).await, 0);
    let gone = s.get_raw_message(1).await.expect_err("deleted");
    assert_eq!(
        gone.kind(),
        stream::LastRawMessageErrorKind::NoMessageFound,
        "{gone}"
    );
}

#[tokio::test]
async fn a_term_removes_the_message_from_work_queue_and_interest_streams() {
    // Why the dlq scenario refuses `terminated = true` beside those retentions:
    // the MSG_TERMINATED advisory names a message that is already gone.
    let server = common::server();
    let (_, js) = context(&server).await;
    for (name, retention) in [
        ("WQTERM", stream::RetentionPolicy::WorkQueue),
        ("INTERM", stream::RetentionPolicy::Interest),
    ] {
        let mut s = stream_with(&js, name, retention, 0).await;
        let c = durable(&s, "c", 3).await;
        js.publish(name.to_lowercase(), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
        receive(&c, 1, Some(AckKind::Term)).await;
        assert_eq!(messages(&mut s).await, 0, "{name}: termed and removed");
    }
}

#[tokio::test]
async fn an_interest_stream_keeps_a_max_delivered_message_after_the_other_consumer_acks() {
    let server = common::server();
    let (_, js) = context(&server).await;
    let mut s = stream_with(&js, "INTMD", stream::RetentionPolicy::Interest, 0).await;
    let mut failing = durable(&s, "failing", 2).await;
    let mut acking = durable(&s, "acking", -1).await;
    for _ in 0..2 {
        js.publish("intmd", "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    receive(&acking, 2, Some(AckKind::Ack)).await;
    settled(&mut acking).await;
    // The failing consumer acks the second message and lets the first run out.
    let mut deliveries = 0;
    while deliveries < 3 {
        let m = failing
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .unwrap()
            .next()
            .await
            .expect("a delivery")
            .unwrap();
        deliveries += 1;
        if m.info().unwrap().stream_sequence == 2 {
            m.double_ack().await.unwrap();
        }
    }
    settled(&mut failing).await;
    assert_eq!(messages(&mut s).await, 1, "the exhausted message stays");
    assert!(s.get_raw_message(1).await.is_ok());
    assert!(
        s.get_raw_message(2).await.is_err(),
        "acked by both: removed"
    );
}

#[tokio::test]
async fn advisory_capture_streams_collect_every_stream_and_refuse_a_second_capture() {
    let server = common::server();
    let (_, js) = context(&server).await;
    js.create_stream(stream::Config {
        name: "ADV".into(),
        subjects: vec![
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>".into(),
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>".into(),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let overlap = js
        .create_stream(stream::Config {
            name: "ADV2".into(),
            subjects: vec!["$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S1.*".into()],
            ..Default::default()
        })
        .await
        .expect_err("overlapping capture");
    assert!(overlap.to_string().contains("overlap"), "{overlap}");

    for name in ["S1", "S2"] {
        let s = stream_with(&js, name, stream::RetentionPolicy::Limits, 2).await;
        let c = durable(&s, "c", 1).await;
        receive(&c, 1, None).await;
        receive(&c, 1, Some(AckKind::Term)).await;
    }
    let mut adv = js.get_stream("ADV").await.unwrap();
    for _ in 0..100 {
        if messages(&mut adv).await == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(messages(&mut adv).await, 4);
    let mut types = Vec::new();
    for seq in 1..=4 {
        let m = adv.get_raw_message(seq).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        types.push(format!("{} {} {}", m.subject, body["type"], body["stream"]));
    }
    types.sort();
    eprintln!("{types:#?}");
    assert!(types.iter().any(|t| t.contains("MAX_DELIVERIES.S1.c")
        && t.contains("io.nats.jetstream.advisory.v1.max_deliver")));
    assert!(types.iter().any(|t| t.contains("MSG_TERMINATED.S2.c")
        && t.contains("io.nats.jetstream.advisory.v1.terminated")));
}

#[tokio::test]
async fn a_redelivered_copy_with_the_same_msg_id_is_flagged_and_stored_once() {
    // The handler's exactly-once rests on this and on the DLQ subjects not
    // overlapping the source stream's.
    let server = common::server();
    let (_, js) = context(&server).await;
    js.create_stream(stream::Config {
        name: "SRC".into(),
        subjects: vec!["jsb.t.s.v.*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut dlq = js
        .create_stream(stream::Config {
            name: "DLQ".into(),
            subjects: vec!["jsb.t.s.v.dlq.>".into()],
            ..Default::default()
        })
        .await
        .expect("jsb.t.s.v.* and jsb.t.s.v.dlq.> do not overlap");
    for _ in 0..2 {
        let ack = js
            .send_publish(
                "jsb.t.s.v.dlq.SRC.c",
                jetstream::message::PublishMessage::build()
                    .payload("x".into())
                    .message_id("SRC.c.1"),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.sequence, 1);
    }
    assert_eq!(messages(&mut dlq).await, 1);
}

// The scenario, end to end.

use common::{assert_all_passed, metric, run_profile};
use jsbench::results::summary::{Summary, VariantReport};

/// A short dlq scenario: 200 msg/s for 1 s, a tenth poison, exhausted
/// after two deliveries 100 ms apart.
fn body(extra: &str, consumer: &str, behaviour: &str, handler: &str) -> String {
    format!(
        "[[scenario]]\nkind = \"dlq\"\nduration = \"1s\"\nrate = 200\n\
         headers = {{ \"Order-Source\" = \"test\" }}\n{extra}\
         [scenario.consumer]\nack_wait = \"100ms\"\nmax_deliver = 2\n{consumer}\
         [scenario.behaviour]\nhandlers = 8\npoison = {{ fraction = 0.1 }}\n{behaviour}\
         [scenario.handler]\nack_wait = \"300ms\"\n{handler}"
    )
}

fn only(summary: &Summary, name: &str) -> VariantReport {
    summary
        .variants()
        .map(|(_, v)| v)
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no variant {name}"))
        .clone()
}

/// Every poison message is dead-lettered exactly once (the invariants read
/// the DLQ back), and nothing else.
fn assert_dead_lettered(v: &VariantReport) {
    let expected = metric(v, "dead_letters.expected");
    assert!(expected > 5.0, "{expected} dead letters");
    assert_eq!(metric(v, "dead_letters.in_dlq"), expected);
    assert_eq!(
        metric(v, "observed.exhausted"),
        metric(v, "planned.exhausted")
    );
    for h in [
        "dlq_latency",
        "dlq_after_deadline",
        "advisory_latency",
        "handler_latency",
    ] {
        assert!(v.histograms.iter().any(|x| x.name == h), "{h}");
    }
    // The final deadline (100 ms) is part of the DLQ latency.
    assert!(metric(v, "dlq_latency.p50") >= 100_000.0);
    assert!(metric(v, "handler_capacity") > 0.0);
}

/// Advisories of a stream that is not jsbench's, and a malformed one,
/// produced while `run` runs: the account-wide capture collects them too.
async fn with_foreign_advisories<T>(
    server: &jsbench::server::EmbeddedServer,
    run: impl std::future::Future<Output = T>,
) -> T {
    let (client, js) = context(server).await;
    let s = stream_with(&js, "FOREIGN", stream::RetentionPolicy::Limits, 0).await;
    let c = durable(&s, "theirs", 1).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let halt = stop.clone();
    let noise = tokio::spawn(async move {
        while !halt.is_cancelled() {
            js.publish("foreign", "theirs".into())
                .await
                .unwrap()
                .await
                .unwrap();
            client
                .publish(
                    "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.FOREIGN.junk",
                    "not an advisory".into(),
                )
                .await
                .unwrap();
            // Received and never acked: exhausted when the 150 ms deadline
            // expires while the next pull waits.
            let mut pull = c
                .batch()
                .max_messages(1)
                .expires(Duration::from_millis(250))
                .messages()
                .await
                .unwrap();
            while pull.next().await.is_some() {}
            // Paced: a pull of one returns at once, and unpaced noise
            // floods the handler on a loaded machine (100k advisories
            // queued ahead of the 36 that matter).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let out = run.await;
    stop.cancel();
    noise.await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_dead_letters_poison_and_termed_once_keeping_originals_and_skipping_foreign_advisories()
 {
    let server = common::server();
    let summary = with_foreign_advisories(
        &server,
        run_profile(
            &server,
            "limits",
            &body(
                "retention = \"limits\"\nterminated = true\n",
                "",
                "term = 0.05\n",
                "",
            ),
        ),
    )
    .await;
    assert_all_passed(&summary);
    let baseline = only(&summary, "baseline");
    assert_eq!(metric(&baseline, "dead_letters.in_dlq"), 0.0);
    let v = only(&summary, "limits");
    assert_dead_lettered(&v);
    assert!(metric(&v, "observed.termed") > 0.0);
    assert_eq!(
        metric(&v, "dead_letters.expected"),
        metric(&v, "observed.exhausted") + metric(&v, "observed.termed"),
        "termed messages are dead-lettered too"
    );
    assert!(v.histograms.iter().any(|h| h.name == "term_dlq_latency"));
    assert!(
        metric(&v, "advisories.foreign") > 0.0,
        "another stream's advisories seen"
    );
    assert!(
        metric(&v, "advisories.malformed") > 0.0,
        "a malformed one termed"
    );
    assert!(v.metric("vs_baseline.e2e_p99_ratio").is_some());
    assert_eq!(metric(&v, "originals.deleted"), 0.0);
}

/// A work queue's originals are gone once copied: the DLQ is the only
/// copy, and the redrive after the run sends each back, the durable (now
/// acking everything) reads each once, and a second redrive stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workqueue_originals_are_deleted_once_their_copies_are_persisted() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "workqueue",
        &body(
            "retention = \"workqueue\"\nbaseline = false\ncapture = \"stream\"\nredrive = true\n",
            "",
            "",
            "get = \"direct\"\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary, "workqueue");
    assert_dead_lettered(&v);
    assert_eq!(
        metric(&v, "originals.deleted"),
        metric(&v, "dead_letters.expected")
    );
    let retention = v
        .invariants
        .iter()
        .find(|i| i.name.starts_with("workqueue"));
    assert!(retention.is_some_and(|i| i.passed), "{:?}", v.invariants);
    let letters = metric(&v, "dead_letters.in_dlq");
    assert_eq!(metric(&v, "redriven"), letters);
    assert_eq!(metric(&v, "redrive_second_pass_duplicates"), letters);
    assert!(metric(&v, "redrive_rate") > 0.0);
    assert!(metric(&v, "redrive_e2e_latency.p50") > 0.0);
    for name in [
        "every dead letter redriven",
        "a second redrive stores nothing",
        "every redriven message consumed once",
    ] {
        let i = v.invariants.iter().find(|i| i.name == name).unwrap();
        assert!(i.passed && i.applicable, "{i:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interest_originals_stay_for_the_consumer_that_gave_up_after_the_other_acks() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "interest",
        &body(
            "retention = \"interest\"\nbaseline = false\n",
            "",
            "",
            "concurrency = 4\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary, "interest");
    assert_dead_lettered(&v);
    assert_eq!(metric(&v, "originals.deleted"), 0.0);
    let retention = v.invariants.iter().find(|i| i.name.starts_with("interest"));
    assert!(
        retention.is_some_and(|i| i.passed && i.detail.contains("the other consumer acked")),
        "{:?}",
        v.invariants
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_killed_between_copy_and_ack_still_leaves_one_copy() {
    // The work queue is the hard case: the kill comes before the delete, so
    // the restarted handler must find the original, republish under the
    // same id (flagged duplicate) and only then delete it.
    let server = common::server();
    let summary = run_profile(
        &server,
        "restart",
        &body(
            "retention = \"workqueue\"\nbaseline = false\n",
            "",
            "",
            "restart_after = 3\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary, "workqueue");
    assert_dead_lettered(&v);
    assert_eq!(metric(&v, "handler.restarts"), 1.0);
    assert!(metric(&v, "advisories.redelivered") >= 1.0);
    assert!(metric(&v, "copies.duplicates_flagged") >= 1.0);
    assert_eq!(
        metric(&v, "copies.published"),
        metric(&v, "dead_letters.expected") + metric(&v, "copies.duplicates_flagged")
    );
    let restart = v
        .invariants
        .iter()
        .find(|i| i.name == "a restarted handler still dead-letters exactly once")
        .expect("the restart is checked");
    assert!(restart.passed, "{restart:?}");
}

/// `--keep` must not break later variants: an account-wide advisory
/// capture kept after the first variant would overlap the second's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_deletes_an_account_wide_capture_that_would_break_the_next_variant() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "kept",
        &body(
            "retention = [\"limits\", \"workqueue\"]\nbaseline = false\ncapture = \"account\"\n",
            "",
            "",
            "",
        ),
    );
    let mut options = common::options(server.url(), &profile, dir.path());
    options.keep = true;
    let outcome = jsbench::run::run(options, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    let summary = common::summary(&outcome.results[0]);
    assert_all_passed(&summary);
    assert_eq!(summary.variants().count(), 2);
    for (_, v) in summary.variants() {
        assert!(
            v.warnings.iter().any(|w| w.contains("deleted anyway")),
            "{}: {:?}",
            v.name,
            v.warnings
        );
    }
    // The rest was kept, as asked.
    assert!(!summary.run.kept_streams.is_empty());
}

/// The delivery article's warning: a stream limit evicts poison originals before the
/// handler reads them. The handler starts 2.5 s late on a stream keeping
/// its last 100 messages (500 ms at 200 msg/s; a poison message is
/// exhausted about 200 ms after it is stored, so its advisory is sent
/// first): the earlier poison originals are gone by then, the handler
/// terms their advisories, and those dead letters are lost and counted,
/// every one below the first sequence the stream kept; the later ones are
/// copied as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn originals_evicted_before_the_handler_are_counted_as_lost_dead_letters() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "evicted",
        &format!(
            "{}[scenario.stream]\nmax_msgs = 100\n",
            body(
                "retention = \"limits\"\nbaseline = false\ncapture = \"stream\"\n",
                "",
                "",
                "start_after = \"2500ms\"\n",
            )
        ),
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary, "limits");
    let lost = metric(&v, "dead_letters.lost_to_eviction");
    assert!(lost > 3.0, "{lost} originals evicted first");
    assert!(
        metric(&v, "dead_letters.in_dlq") > 3.0,
        "the later ones copied"
    );
    assert_eq!(metric(&v, "originals.gone"), lost);
    assert_eq!(
        metric(&v, "dead_letters.expected") + lost,
        metric(&v, "observed.exhausted")
    );
    let gone = v
        .invariants
        .iter()
        .find(|i| i.name == "originals found gone were evicted by the stream's limits")
        .unwrap();
    assert!(gone.passed && gone.applicable, "{gone:?}");
    assert!(v.warnings.iter().any(|w| w.contains("dead letters lost")));
}
