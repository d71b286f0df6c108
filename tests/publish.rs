//! The publish scenario against a real server: every mode, the dedup
//! promise (flagged = injected, late retries stored, the stream read back),
//! and the reference loops.

mod common;

use common::{assert_all_passed, metric, run_profile};

fn publish(extra: &str) -> String {
    format!("[[scenario]]\nkind = \"publish\"\n{extra}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_duplicates_are_flagged_and_late_retries_stored_again() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "promise",
        &publish(
            "duration = \"2500ms\"\nrates = [1000]\npublishers = 2\nmsg_id = \"unique\"\n\
             duplicates = 0.1\nlate_duplicates = 0.05\nduplicate_window = \"500ms\"\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    let injected = metric(v, "duplicates_injected");
    assert!(injected > 100.0, "about 10% of 2500 sends: {injected}");
    assert_eq!(metric(v, "duplicates_flagged"), injected);
    let late = metric(v, "late_retries");
    assert!(late > 20.0, "{late}");
    assert_eq!(metric(v, "late_retries_stored"), late);
    assert_eq!(v.ledger.duplicates as f64, injected);
    assert_eq!(v.ledger.published, 2500);
    // Stored: every new message once, every late retry once more.
    assert_eq!(v.ledger.persisted as f64, 2500.0 - injected);
    assert_eq!(v.params["read_back_messages"], v.ledger.persisted);
    for name in [
        "duplicates flagged = injected",
        "retries after the window stored",
        "stream count = unique persisted",
        "nothing lost (read back)",
        "nothing stored unconfirmed (read back)",
    ] {
        assert!(v.invariants.iter().any(|i| i.name == name), "checks {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_and_async_max_rate_publish_everything_with_and_without_ids() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "modes",
        &publish(
            "name = \"sync\"\nmode = \"sync\"\nduration = \"500ms\"\nrates = [\"max\"]\n\
             [[scenario]]\nkind = \"publish\"\nname = \"async\"\nduration = \"500ms\"\n\
             rates = [\"max\"]\nmsg_id = [\"none\", \"unique\"]\npub_ack_window = 256\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<String> = summary
        .variants()
        .map(|(s, v)| format!("{}/{}", s.name, v.name))
        .collect();
    assert_eq!(
        names,
        [
            "sync/rate-max.id-none",
            "async/rate-max.id-none",
            "async/rate-max.id-unique"
        ]
    );
    for (_, v) in summary.variants() {
        assert!(v.ledger.published > 100, "{}: {:?}", v.name, v.ledger);
        assert_eq!(v.ledger.persisted, v.ledger.published);
        assert!(metric(v, "publish_rate") > 0.0);
        assert!(metric(v, "publish_acked_rate") > 0.0);
        assert!(metric(v, "client_cpu_per_msg") > 0.0);
        assert!(
            v.metric("server_cpu_per_msg").is_none(),
            "an external server without --monitor has no CPU figure"
        );
        assert!(v.metric("target_rate").is_none(), "max rate has no target");
    }
    let (_, unique) = summary.variants().last().unwrap();
    assert!(metric(unique, "dedup_price.throughput_ratio") > 0.0);
    assert!(metric(unique, "dedup_price.p99_ratio") > 0.0);
    let (_, sync) = summary.variants().next().unwrap();
    assert_eq!(sync.params["pub_ack_window"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_loops_run_beside_and_are_compared() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "ceiling",
        &publish(
            "duration = \"500ms\"\nrates = [\"max\"]\nmsg_id = [\"none\", \"unique\"]\n\
             pub_ack_window = 512\nreference = [\"raw\", \"idiomatic\", \"core\"]\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    // In the order they ran: raw before and after jsbench's own.
    assert_eq!(
        names,
        [
            "rate-max.core",
            "rate-max.id-none.idiomatic",
            "rate-max.id-none.raw-before",
            "rate-max.id-none",
            "rate-max.id-none.raw-after",
            "rate-max.id-unique.idiomatic",
            "rate-max.id-unique.raw-before",
            "rate-max.id-unique",
            "rate-max.id-unique.raw-after",
        ]
    );
    for (_, v) in summary.variants() {
        assert!(metric(v, "publish_rate") > 0.0, "{}", v.name);
    }
    for (_, v) in summary
        .variants()
        .filter(|(_, v)| !v.name.contains('.') || v.name.matches('.').count() == 1)
        .filter(|(_, v)| v.name.starts_with("rate-max.id-") && !v.name.ends_with("idiomatic"))
        .filter(|(_, v)| !v.name.contains("raw"))
    {
        assert!(metric(v, "vs_raw.throughput_ratio") > 0.0, "{}", v.name);
        assert!(metric(v, "vs_idiomatic.throughput_ratio") > 0.0);
        assert!(metric(v, "vs_core.throughput_ratio") > 0.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_sizes_headers_and_per_publisher_rates() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "mixed",
        &publish(
            "duration = \"1s\"\nrates = [150]\nrate_per = \"publisher\"\npublishers = 2\n\
             subjects = 3\nheaders = { \"X-Tenant\" = \"t1\" }\n\
             message_size = { distribution = \"uniform\", min = 100, max = 300 }\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    assert_eq!(
        metric(v, "target_rate"),
        300.0,
        "150 per publisher, 2 publishers"
    );
    assert_eq!(v.ledger.published, 300);
    let mb_s = metric(v, "publish_throughput");
    let mean_size = mb_s * 1e6 / metric(v, "publish_rate");
    assert!(
        (150.0..250.0).contains(&mean_size),
        "mean size about 200: {mean_size}"
    );
    assert_eq!(v.params["subjects"], 3);
    assert_eq!(v.params["message_size"], "uniform 100..=300");
}

/// A publisher at `max` starts at t0, not when it is handed its timing:
/// the lead-in before t0 (there so every publisher is up when the
/// schedule starts) is in no rate's span, so nothing may be sent in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpaced_publisher_sends_nothing_before_t0() {
    use std::time::Duration;

    use jsbench::connect::ConnectSettings;
    use jsbench::load::{Publisher, PublisherConfig, RetryPlan, Timing};
    use jsbench::profile::{MsgId, SizePlan};
    use jsbench::record::clock;
    use jsbench::record::schedule::Schedule;

    let server = common::server();
    let settings = ConnectSettings::new(server.url(), Duration::from_secs(5)).unwrap();
    let client = settings.connect("setup").await.unwrap();
    let js = settings.jetstream(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "LEADIN".into(),
        subjects: vec!["leadin.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let config = PublisherConfig {
        subject_stride: 1,
        index: 0,
        subjects: vec!["leadin.1".into()],
        message_size: SizePlan::Fixed(128),
        schedule: Schedule {
            t0_ns: 0,
            total_rate: None,
            stride: 1,
            offset: 0,
            total_messages: 0,
            end_ns: u64::MAX,
            arrivals: None,
        },
        window: 256,
        msg_id: MsgId::None,
        msg_id_prefix: String::new(),
        headers: Vec::new(),
        retries: RetryPlan::default(),
        seed: 1,
        record_from_ns: 0,
        pub_ack_timeout: Duration::from_secs(10),
        timeline_origin_ns: 0,
        resend_after: None,
        wake_every: None,
        client: jsbench::profile::PublishClient::Direct,
        trace_every: 0,
        trace_prefix: String::new(),
        drop_pub_acks: 0,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let mut publisher = Publisher::start(&settings, "publisher-0", config, stop)
        .await
        .unwrap();
    let handed = clock::now_ns();
    let t0 = handed + 300_000_000;
    publisher.go(Timing {
        t0_ns: t0,
        record_from_ns: t0,
        end_ns: t0 + 200_000_000,
    });
    let (send, ack) = publisher.finish().await.unwrap();
    assert!(send.sent > 100, "it published: {}", send.sent);
    assert!(
        send.first_sent_ns >= t0,
        "first send {} ms after go, t0 300 ms after",
        (send.first_sent_ns - handed) / 1_000_000
    );
    assert_eq!(ack.acked, send.sent);
}

/// One publisher at `max` with a window of 256 into a stream of its own,
/// from t0 (100 ms from now) for `warmup` and 300 ms after it; what it
/// sent and what its PubAcks said, with t0 and the warm-up's end.
async fn max_rate_publish(
    stream: &str,
    warmup_ns: u64,
) -> (
    jsbench::load::SendReport,
    jsbench::load::AckReport,
    u64,
    u64,
) {
    use std::time::Duration;

    use jsbench::connect::ConnectSettings;
    use jsbench::load::{Publisher, PublisherConfig, RetryPlan, Timing};
    use jsbench::profile::{MsgId, SizePlan};
    use jsbench::record::clock;
    use jsbench::record::schedule::Schedule;

    let server = common::server();
    let settings = ConnectSettings::new(server.url(), Duration::from_secs(5)).unwrap();
    let client = settings.connect("setup").await.unwrap();
    let js = settings.jetstream(client);
    let subject = stream.to_lowercase();
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.into(),
        subjects: vec![format!("{subject}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let config = PublisherConfig {
        subject_stride: 1,
        index: 0,
        subjects: vec![format!("{subject}.1")],
        message_size: SizePlan::Fixed(128),
        schedule: Schedule {
            t0_ns: 0,
            total_rate: None,
            stride: 1,
            offset: 0,
            total_messages: 0,
            end_ns: u64::MAX,
            arrivals: None,
        },
        window: 256,
        msg_id: MsgId::None,
        msg_id_prefix: String::new(),
        headers: Vec::new(),
        retries: RetryPlan::default(),
        seed: 1,
        record_from_ns: 0,
        pub_ack_timeout: Duration::from_secs(10),
        timeline_origin_ns: 0,
        resend_after: None,
        wake_every: None,
        client: jsbench::profile::PublishClient::Direct,
        trace_every: 0,
        trace_prefix: String::new(),
        drop_pub_acks: 0,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let mut publisher = Publisher::start(&settings, "publisher-0", config, stop)
        .await
        .unwrap();
    let t0 = clock::now_ns() + 100_000_000;
    let record_from = t0 + warmup_ns;
    publisher.go(Timing {
        t0_ns: t0,
        record_from_ns: record_from,
        end_ns: record_from + 300_000_000,
    });
    let (send, ack) = publisher.finish().await.unwrap();
    (send, ack, t0, record_from)
}

/// A rate counts the sends intended from the end of the warm-up, never the
/// warm-up's (the PubAck window's first burst at `max` among them), and
/// the PubAcks confirming exactly those sends give the acknowledged rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_rate_counts_from_the_end_of_the_warm_up() {
    let (send, ack, _, record_from) = max_rate_publish("WARMUP", 300_000_000).await;
    assert!(
        send.sent > send.measured,
        "the warm-up's sends are not counted"
    );
    assert!(
        send.measured > 100,
        "it published after the warm-up: {}",
        send.measured
    );
    assert_eq!(send.burst, 0, "the warm-up held the first burst");
    assert!(send.first_measured_ns >= record_from);
    assert_eq!(
        send.measured_bytes,
        128 * send.measured,
        "the bytes of the counted sends"
    );
    assert_eq!(ack.measured_acked, send.measured);
    assert!(ack.first_measured_ack_ns > send.first_measured_ns);
    assert!(ack.last_measured_ack_ns >= ack.first_measured_ack_ns);
}

/// With no warm-up (the default) a max rate still leaves out the PubAck
/// window's first burst: the first 256 sends, which nothing held back.
/// The acknowledged rate keeps their PubAcks, which came at the server's
/// pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_warm_up_a_max_rate_leaves_out_the_first_windows_burst() {
    let (send, ack, t0, _) = max_rate_publish("NOWARMUP", 0).await;
    assert_eq!(send.burst, 256, "{send:?}");
    assert!(send.measured > 100, "it published past the burst: {send:?}");
    assert_eq!(send.measured + send.burst, send.sent);
    assert_eq!(send.measured_bytes, 128 * send.measured);
    assert!(send.first_measured_ns > send.first_sent_ns && send.first_sent_ns >= t0);
    assert_eq!(ack.measured_acked, send.sent);
}

/// What every atomic batch variant must show: whole batches of its size,
/// all committed and read back whole, a commit latency.
fn assert_batches_whole(summary: &jsbench::results::summary::Summary) {
    assert_all_passed(summary);
    for (_, v) in summary
        .variants()
        .filter(|(_, v)| v.name.contains("batch-"))
    {
        let size: u64 = v.name.rsplit('-').next().unwrap().parse().unwrap();
        assert!(v.ledger.published > 0, "{}", v.name);
        assert_eq!(v.ledger.persisted, v.ledger.published, "{}", v.name);
        assert_eq!(
            metric(v, "batches_committed") as u64 * size,
            v.ledger.published,
            "{}",
            v.name
        );
        assert!(metric(v, "batch_commit_latency.p50") > 0.0, "{}", v.name);
        assert!(metric(v, "publish_rate") > 0.0, "{}", v.name);
        for name in [
            "every batch committed",
            "every committed batch stored whole, contiguous and once (read back)",
            "nothing stored from a failed batch (read back)",
        ] {
            let check = v.invariants.iter().find(|i| i.name == name);
            assert!(check.is_some_and(|c| c.passed), "{}: {name}", v.name);
        }
    }
}

/// Paced atomic batches beside windowed publishing in one run, with and
/// without Nats-Msg-Id: batches leave on the message rate's schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_atomic_batches_run_beside_windowed_publishing_and_are_stored_whole() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "batches",
        &publish(
            "duration = \"500ms\"\nrates = [1000]\nmsg_id = [\"none\", \"unique\"]\n\
             batch = [10, 100]\n",
        ),
    )
    .await;
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rate-1000.id-none",
            "rate-1000.id-none.batch-10",
            "rate-1000.id-none.batch-100",
            "rate-1000.id-unique",
            "rate-1000.id-unique.batch-10",
            "rate-1000.id-unique.batch-100",
        ]
    );
    assert_batches_whole(&summary);
    for (_, v) in summary
        .variants()
        .filter(|(_, v)| v.name.contains("batch-"))
    {
        // 1000 msg/s for 0.5 s, in whole batches.
        assert_eq!(v.ledger.published, 500, "{}", v.name);
        assert_eq!(metric(v, "target_rate"), 1000.0, "{}", v.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_batches_at_max_rate_are_stored_whole() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "batches-max",
        &publish("duration = \"500ms\"\nrates = [\"max\"]\nmsg_id = \"unique\"\nbatch = 100\n"),
    )
    .await;
    assert_eq!(summary.variants().count(), 2);
    assert_batches_whole(&summary);
}

/// Runs `body` with `jsbench run` on the embedded server (no server named
/// anywhere), or with `extra` flags; the output and the summary if any.
fn run_embedded(
    dir: &std::path::Path,
    body: &str,
    extra: &[&str],
) -> (
    std::process::Output,
    Option<jsbench::results::summary::Summary>,
) {
    let profile = common::profile(dir, "persist", body);
    let out_dir = dir.join("results");
    let out = common::run(
        common::jsbench()
            .args(["run", profile.to_str().unwrap()])
            .args(extra)
            .args(["--progress", "never", "-o"])
            .arg(&out_dir)
            .env_remove("NATS_URL")
            .env_remove("NATS_CONTEXT"),
    );
    let summary = std::fs::read_dir(&out_dir)
        .ok()
        .and_then(|mut d| d.next())
        .map(|_| common::summary(&common::results_dir(&out_dir)));
    (out, summary)
}

const PERSIST_SWEEP: &str = r#"
[server]
sync = ["default", "always"]
[[scenario]]
kind = "publish"
duration = "1s"
rates = [200]
[scenario.stream]
persist = ["default", "async"]
"#;

/// One run, four settings: each variant ran on the server the sync value
/// asked for (restarted in between, as /varz says) and a stream whose info
/// reports the persist mode asked for, and nothing PubAcked was lost.
#[test]
fn sync_and_persist_variants_run_in_one_run_each_on_the_setting_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_embedded(dir.path(), PERSIST_SWEEP, &[]);
    let (stdout, stderr) = common::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary = summary.expect("a results folder");
    common::assert_all_passed(&summary);
    let run_sync = summary.run.server.persistence.as_ref().expect("stated");
    assert_eq!(run_sync.sync_always, Some(false), "{run_sync:?}");
    assert!(run_sync.api_level.is_some(), "{run_sync:?}");
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    assert_eq!(variants.len(), 4);
    for v in variants {
        let always = v.name.contains("sync-always");
        let asynchronous = v.name.contains("persist-async");
        assert_eq!(v.params["server.sync_always"], always, "{}", v.name);
        assert_eq!(
            v.params["server.sync"],
            if always { "always" } else { "every 2m" },
            "{}",
            v.name
        );
        let stream = &v.streams[0];
        assert_eq!(stream.replicas, 1);
        assert_eq!(stream.storage.as_deref(), Some("file"));
        assert_eq!(
            stream.persist_mode.as_deref(),
            Some(if asynchronous { "async" } else { "default" }),
            "{}",
            v.name
        );
    }
}

/// The sync setting is applied by starting the server with it: a server
/// jsbench did not start is refused before anything runs, naming the key.
#[test]
fn a_sync_setting_for_a_server_jsbench_did_not_start_is_refused_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_embedded(
        dir.path(),
        PERSIST_SWEEP,
        &["--server", "nats://127.0.0.1:1"],
    );
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("server.sync"), "{stderr}");
    assert!(summary.is_none(), "nothing ran");
    // A local cluster keeps one setting: a list is refused before it starts.
    let (out, summary) = run_embedded(dir.path(), PERSIST_SWEEP, &["--cluster", "3"]);
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("one server.sync"), "{stderr}");
    assert!(summary.is_none(), "nothing ran");
}

/// What every fast-ingest batch variant must show: every batch committed,
/// every message acknowledged and read back once, in order, the flow the
/// server granted, and ack latencies.
fn assert_fast_batches_held(summary: &jsbench::results::summary::Summary) {
    assert_all_passed(summary);
    for (_, v) in summary
        .variants()
        .filter(|(_, v)| v.name.contains(".fast-"))
    {
        assert!(v.ledger.published > 0, "{}", v.name);
        assert_eq!(v.ledger.persisted, v.ledger.published, "{}", v.name);
        assert!(metric(v, "fast_ack_latency.p50") > 0.0, "{}", v.name);
        assert!(metric(v, "batch_commit_latency.p50") > 0.0, "{}", v.name);
        assert_eq!(
            metric(v, "fast_gaps") + metric(v, "fast_errors"),
            0.0,
            "{}",
            v.name
        );
        for name in [
            "every fast batch committed",
            "every acknowledged message stored once, in order (read back)",
            "nothing stored that was not sent (read back)",
            "every message sent reached the server (no gap or error reported)",
        ] {
            let check = v.invariants.iter().find(|i| i.name == name);
            assert!(check.is_some_and(|c| c.passed), "{}: {name}", v.name);
        }
    }
}

/// Paced fast batches beside windowed and atomic publishing in one run,
/// both gap modes and two outstanding-ack settings: batches of 250 at
/// 2,000 msg/s with a flow of 100 get flow acks at 100 and 200 and the
/// PubAck at 250.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_fast_batches_run_beside_windowed_and_atomic_publishing() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "fast",
        &publish(
            "duration = \"500ms\"\nrates = [2000]\nbatch = 100\nfast_batch = 250\n\
             fast_acks = [1, 2]\nfast_flow = 100\nfast_gap = [\"fail\", \"ok\"]\n",
        ),
    )
    .await;
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rate-2000.id-none",
            "rate-2000.id-none.batch-100",
            "rate-2000.id-none.fast-250.acks-1.flow-100.gap-fail",
            "rate-2000.id-none.fast-250.acks-1.flow-100.gap-ok",
            "rate-2000.id-none.fast-250.acks-2.flow-100.gap-fail",
            "rate-2000.id-none.fast-250.acks-2.flow-100.gap-ok",
        ]
    );
    assert_fast_batches_held(&summary);
    for (_, v) in summary
        .variants()
        .filter(|(_, v)| v.name.contains(".fast-"))
    {
        // 2000 msg/s for 0.5 s: four whole batches.
        assert_eq!(v.ledger.published, 1000, "{}", v.name);
        assert_eq!(metric(v, "fast_batches_committed"), 4.0, "{}", v.name);
        assert_eq!(
            metric(v, "fast_flow_first"),
            100.0,
            "a lone publisher gets its flow"
        );
        assert_eq!(metric(v, "fast_flow_acks"), 8.0, "{}", v.name);
        assert_eq!(metric(v, "target_rate"), 2000.0, "{}", v.name);
        // Paced: how late the sender left, held back by the flow or not.
        assert!(v.metric("send_lag.p50").is_some(), "{}", v.name);
    }
}

/// At max rate with one ack outstanding and a flow of 50 the sender must
/// stop for acks, and still every acknowledged message is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_batches_at_max_rate_wait_for_the_flow_and_are_stored_once_in_order() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "fast-max",
        &publish(
            "duration = \"500ms\"\nrates = [\"max\"]\nmsg_id = \"unique\"\nfast_batch = 2000\n\
             fast_acks = 1\nfast_flow = 50\n",
        ),
    )
    .await;
    assert_eq!(summary.variants().count(), 2);
    assert_fast_batches_held(&summary);
    let (_, v) = summary.variants().nth(1).unwrap();
    assert!(metric(v, "fast_waits") > 0.0, "{}", v.name);
    assert!(metric(v, "client_cpu_per_msg") > 0.0, "{}", v.name);
    assert!(
        v.metric("send_lag.p50").is_none(),
        "no schedule to lag at max"
    );
}

/// A stream full at 450 messages (discard new) refuses a fast batch's
/// message mid-batch: with gap `fail` the server ends that batch at the
/// last message it stored and refuses the next batch's start, and the
/// variant names both by the server's code, while every acknowledged
/// message is still read back once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_batch_refused_by_a_full_stream_fails_by_the_servers_code() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "fast-full",
        &publish(
            "duration = \"500ms\"\nrates = [2000]\nfast_batch = 300\nfast_flow = 100\n\
             [scenario.stream]\nmax_msgs = 450\ndiscard = \"new\"\n",
        ),
    )
    .await;
    let (_, v) = summary
        .variants()
        .find(|(_, v)| v.name.contains(".fast-"))
        .expect("the fast variant");
    let check = |name: &str| {
        let c = v.invariants.iter().find(|i| i.name == name).unwrap();
        eprintln!("{name}: {} ({})", c.passed, c.detail);
        (c.passed, c.detail.clone())
    };
    let (committed, why) = check("every fast batch committed");
    assert!(
        !committed
            && why.starts_with("1 of 3 batches")
            && why.contains("batch 2: refused with 10077 at batch sequence 1"),
        "{why}"
    );
    let (reached, why) = check("every message sent reached the server (no gap or error reported)");
    assert!(
        !reached && why.contains("batch 1 message 151, with 10077"),
        "{why}"
    );
    let (once, why) = check("every acknowledged message stored once, in order (read back)");
    assert!(once && why.starts_with("450 of 450 acknowledged"), "{why}");
    assert!(check("nothing stored that was not sent (read back)").0);
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("sending stopped: batch 2 was refused")),
        "the refusal stops the publisher: {:?}",
        v.warnings
    );
    assert_eq!(metric(v, "fast_batches_committed"), 2.0);
    assert_eq!(v.ledger.persisted, 450);
}

/// Another batch open on the same stream makes the server ask for less:
/// each of the publisher's batches starts at an ack per message and is
/// ramped by doubling to 500 / 2 open batches = 250. The publisher follows
/// (it waits by the flow granted, not the 500 it asked for), and every
/// acknowledged message is still stored once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_publisher_follows_the_flow_the_server_asks_for() {
    use jsbench::load::fast_batch::{FastConfig, GapMode, publish_fast};
    use jsbench::record::clock;
    use jsbench::streams::fast_batches::{audit, read_stamps};
    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "SHARED".into(),
        subjects: vec!["shared".into()],
        allow_batch_publish: true,
        ..Default::default()
    })
    .await
    .unwrap();
    // A batch left open (the server keeps it 10 s, past this test's use).
    let other = client.new_inbox();
    client
        .publish_with_reply(
            "shared",
            format!("{other}.other.500.fail.1.0.$FI"),
            "x".into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
    let t0 = clock::now_ns() + 50_000_000;
    let config = FastConfig {
        subject: "shared".into(),
        size: 5000,
        flow: 500,
        outstanding: 2,
        gap: GapMode::Fail,
        rate: None,
        t0_ns: t0,
        record_from_ns: t0,
        end_ns: t0 + 500_000_000,
        message_size: 64,
        msg_id_prefix: None,
        ack_timeout: std::time::Duration::from_secs(5),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let report = publish_fast(&client, &config, &stop).await.unwrap();
    assert_eq!(report.flow_first, 1, "a second open batch starts at 1");
    assert_eq!(report.flow_max, 250, "ramped to 500 / 2 open batches");
    assert!(report.waits > 0);
    assert_eq!(report.failed().count(), 0, "{:?}", report.batches.first());
    let (stored, complete) = read_stamps(&js, "SHARED", std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert!(complete);
    let a = audit(&report.batches, report.messages_sent, &stored, complete);
    assert!(a.held(), "{a:?}");
    assert_eq!(a.acked, report.messages_sent);
    assert_eq!(
        a.foreign.len(),
        1,
        "the other batch's one message: {:?}",
        a.foreign
    );
}
