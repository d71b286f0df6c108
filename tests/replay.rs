//! The replay scenario against a real server: every deliver policy replays
//! exactly the set it selects, original pacing keeps the recorded gaps
//! where instant does not, and the server behaviours the scenario relies
//! on. Structure and invariants only, never a speed target: the bounds
//! below hold however slow the machine is.

mod common;

use std::time::Duration;

use async_nats::jetstream::{
    self,
    consumer::{self, DeliverPolicy, ReplayPolicy},
    stream,
};
use futures::StreamExt;

use common::{assert_all_passed, metric};
use jsbench::results::summary::{Summary, VariantReport};

fn replay(body: &str) -> String {
    format!("[[scenario]]\nkind = \"replay\"\n{body}")
}

fn variant<'a>(summary: &'a Summary, name: &str) -> &'a VariantReport {
    summary
        .variants()
        .map(|(_, v)| v)
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no variant {name}"))
}

fn param(v: &VariantReport, name: &str) -> u64 {
    v.params[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{}: no param {name}", v.name))
}

/// Runs a profile and keeps its results folder, for the charts.
async fn run_keeping(
    server: &jsbench::server::EmbeddedServer,
    body: &str,
) -> (tempfile::TempDir, Summary) {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(dir.path(), "replay", body);
    let outcome = jsbench::run::run(
        common::options(server.url(), &profile, dir.path()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    let summary = common::summary(&outcome.results[0]);
    (dir, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deliver_policy_replays_exactly_its_selection() {
    let server = common::server();
    let summary = common::run_profile(
        &server,
        "policies",
        &replay(
            "duration = \"1s\"\nrate = 300\narrival = { pattern = \"poisson\", seed = 3 }\n\
             subjects = 3\nstart_sequence = 100\nstart_time = \"600ms\"\n\
             instant = [\"all\", \"by_start_sequence\", \"by_start_time\", \"last\", \
             \"last_per_subject\", \"new\"]\noriginal = []\nlive_tail = true\n\
             live_rate = 400\nlive_duration = \"600ms\"\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    let mut expected = vec!["record".to_string()];
    for deliver in [
        "all",
        "by_start_sequence",
        "by_start_time",
        "last",
        "last_per_subject",
    ] {
        for reader in ["ordered", "pull"] {
            expected.push(format!("instant.{deliver}.{reader}"));
        }
    }
    for deliver in ["new", "live_tail"] {
        for reader in ["ordered", "pull"] {
            expected.push(format!("instant.{deliver}.{reader}"));
        }
    }
    assert_eq!(names, expected);

    let record = variant(&summary, "record");
    let recorded = metric(record, "messages") as u64;
    assert_eq!(recorded, metric(record, "planned_messages") as u64);
    assert!(recorded > 150, "Poisson at 300/s for 1 s: {recorded}");
    assert_eq!(record.ledger.lost, 0);
    for reader in ["ordered", "pull"] {
        let v = |deliver: &str| variant(&summary, &format!("instant.{deliver}.{reader}"));
        let selected = |deliver: &str| param(v(deliver), "selected");
        let first = |deliver: &str| metric(v(deliver), "first_seq") as u64;
        assert_eq!(selected("all"), recorded);
        assert_eq!(first("all"), 1);
        assert_eq!(selected("by_start_sequence"), recorded - 99);
        assert_eq!(first("by_start_sequence"), 100);
        let by_time = selected("by_start_time");
        assert!(
            by_time > 0 && by_time < recorded,
            "the recording's last 0.4 s: {by_time} of {recorded}"
        );
        assert_eq!(first("by_start_time") + by_time - 1, recorded);
        assert_eq!(selected("last"), 1);
        assert_eq!(first("last"), recorded);
        assert_eq!(selected("last_per_subject"), 3, "one per subject");
        assert!(first("last_per_subject") >= recorded - 2);
        // New: only what the live publisher added while the consumer read.
        let new = v("new");
        assert_eq!(param(new, "selected"), new.ledger.persisted);
        assert!(new.ledger.persisted > 100, "{:?}", new.ledger);
        // The live tail: the whole stream, including what was added since.
        let tail = v("live_tail");
        assert_eq!(param(tail, "selected"), param(tail, "recording_messages"));
        assert!(metric(tail, "time_to_live_tail") > 0.0);
        assert!(metric(tail, "caught_up_messages") >= recorded as f64);
        for (_, x) in summary.variants().filter(|(_, x)| x.name != "record") {
            assert_eq!(x.ledger.lost, 0, "{}", x.name);
            for check in [
                "first message = the policy's first",
                "count = selected count",
                "in stream order",
                "nothing lost",
                "nothing extra",
                "each delivery is the recorded message",
                "server reports nothing pending",
            ] {
                assert!(
                    x.invariants.iter().any(|i| i.name == check),
                    "{} checks {check}",
                    x.name
                );
            }
        }
    }
    let catch_up = variant(&summary, "instant.all.pull");
    assert!(metric(catch_up, "catch_up_rate") > 0.0);
    assert!(metric(catch_up, "catch_up_throughput") > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_pacing_keeps_the_recorded_gaps_and_instant_does_not() {
    let server = common::server();
    // 40 ms gaps, each followed by two 300 µs gaps (which the server does
    // not pace).
    let (dir, summary) = run_keeping(
        &server,
        &replay(
            "duration = \"1s\"\nsubjects = 2\n\
             arrival = { pattern = \"gaps\", gaps = [\"40ms\", \"300us\", \"300us\"] }\n\
             instant = [\"all\"]\noriginal = [\"all\", \"by_start_time\"]\nstart_time = \"500ms\"\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let recorded = metric(variant(&summary, "record"), "messages");
    assert!(recorded >= 60.0, "about 73 messages: {recorded}");
    for reader in ["ordered", "pull"] {
        let original = variant(&summary, &format!("original.all.{reader}"));
        let span = metric(original, "original_span");
        // The server waits out every recorded gap above 1 ms, so the replay
        // is at most the unpaced gaps (1 ms each at most) shorter than the
        // recording, less what a late first delivery hides.
        let unpaced = metric(original, "gap_error_by_gap.le_1ms.count");
        assert!(
            unpaced > 0.0,
            "{reader}: the 300 µs gaps are in their class"
        );
        let floor = span - unpaced * 0.001 - 0.05;
        assert!(
            metric(original, "replayed_span") >= floor,
            "{reader}: replayed {} s of a {span} s recording, at least {floor} s",
            metric(original, "replayed_span")
        );
        assert!(metric(original, "duration_ratio") >= floor / span);
        assert!(metric(original, "gap_error_by_gap.10ms_100ms.count") > 0.0);
        for name in [
            "gap_error.p50",
            "gap_error.p99",
            "drift.final",
            "drift.abs_p99",
        ] {
            metric(original, name);
        }
        let names: Vec<&str> = original
            .histograms
            .iter()
            .map(|h| h.name.as_str())
            .collect();
        for h in [
            "gap_error.late",
            "gap_error.early",
            "drift.late",
            "drift.early",
        ] {
            assert!(names.contains(&h), "{reader}: histogram {h} in {names:?}");
        }
        let series = &original.timelines["pacing.original_us"];
        assert_eq!(
            series.counts.len(),
            original.timelines["pacing.replayed_us"].counts.len()
        );
        assert_eq!(
            series.counts.len() as f64,
            metric(original, "messages"),
            "a short replay keeps every message in its series"
        );
        assert_eq!(series.counts[0], 0);

        let instant = variant(&summary, &format!("instant.all.{reader}"));
        assert!(
            instant.metric("duration_ratio").is_none(),
            "no pacing figures"
        );
        assert!(metric(instant, "catch_up_time") > 0.0);
        // Instant replay does not wait out the gaps.
        let instant_span = metric(instant, "catch_up_time") / 1e3;
        assert!(
            instant_span < span / 2.0,
            "{reader}: {instant_span} s for what took {span} s to record"
        );

        let later = variant(&summary, &format!("original.by_start_time.{reader}"));
        assert!(metric(later, "original_span") < span);
    }
    let charts = common::results_dir(dir.path()).join("charts");
    for chart in [
        "replay.replay_drift",
        "replay.replay_gap_error",
        "replay.replay_gap_error_by_gap",
    ] {
        for ext in ["svg", "png"] {
            let file = charts.join(format!("{chart}.{ext}"));
            assert!(file.is_file(), "{} drawn", file.display());
        }
    }
}

async fn stream_with(
    server: &jsbench::server::EmbeddedServer,
    messages: usize,
) -> (async_nats::Client, jetstream::stream::Stream) {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let stream = js
        .create_stream(stream::Config {
            name: "R".into(),
            subjects: vec!["r.*".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..messages {
        js.publish(format!("r.{}", i % 3), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    (client, stream)
}

/// (sequence, server timestamp in ns) of every message a consumer delivers
/// until `pending` reaches zero.
async fn read_all(stream: &jetstream::stream::Stream, deliver: DeliverPolicy) -> Vec<(u64, i128)> {
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: deliver,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .expect("a delivery within 5 s")
            .unwrap()
            .unwrap();
        let info = m.info().unwrap();
        out.push((info.stream_sequence, info.published.unix_timestamp_nanos()));
        if info.pending == 0 {
            return out;
        }
    }
}

#[tokio::test]
async fn last_per_subject_needs_a_filter_subject() {
    let server = common::server();
    let (_client, stream) = stream_with(&server, 7).await;
    let refused = match stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("lps".into()),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
    {
        Ok(_) => panic!("a last_per_subject consumer without a filter subject was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("10094"), "{refused}");
    assert!(refused.contains("filter subject"), "{refused}");
    // With a wildcard filter: each subject's last message (r.0: 1, 4, 7;
    // r.1: 2, 5; r.2: 3, 6).
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("lps".into()),
            deliver_policy: DeliverPolicy::LastPerSubject,
            filter_subject: "r.*".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer
        .fetch()
        .max_messages(10)
        .expires(Duration::from_millis(500))
        .messages()
        .await
        .unwrap();
    let mut seqs = Vec::new();
    while let Some(m) = batch.next().await {
        seqs.push(m.unwrap().info().unwrap().stream_sequence);
    }
    assert_eq!(seqs, [5, 6, 7]);
}

#[tokio::test]
async fn by_start_time_is_inclusive_to_the_nanosecond() {
    let server = common::server();
    let (_client, stream) = stream_with(&server, 10).await;
    let all = read_all(&stream, DeliverPolicy::All).await;
    assert_eq!(all.len(), 10);
    let (seq, ts) = all[4];
    let at = |ns: i128| DeliverPolicy::ByStartTime {
        start_time: time::OffsetDateTime::from_unix_timestamp_nanos(ns).unwrap(),
    };
    let from = read_all(&stream, at(ts)).await;
    assert_eq!(
        from[0].0, seq,
        "a message stamped exactly at the start is selected"
    );
    assert_eq!(from.len(), 6);
    let after = read_all(&stream, at(ts + 1)).await;
    assert_eq!(after[0].0, seq + 1, "one nanosecond later it is not");
}

#[tokio::test]
async fn an_original_replay_waits_out_a_long_gap() {
    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let stream = js
        .create_stream(stream::Config {
            name: "P".into(),
            subjects: vec!["p".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    // Three messages back to back, a 150 ms gap, three more back to back.
    for i in 0..6 {
        if i == 3 {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        js.publish("p", "x".into()).await.unwrap().await.unwrap();
    }
    let consumer = stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            replay_policy: ReplayPolicy::Original,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut received = Vec::new();
    for _ in 0..6 {
        let m = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        received.push((
            std::time::Instant::now(),
            m.info().unwrap().published.unix_timestamp_nanos(),
        ));
    }
    let original = Duration::from_nanos((received[3].1 - received[2].1) as u64);
    let replayed = received[3].0 - received[2].0;
    assert!(original >= Duration::from_millis(150));
    // Client-side receipt can make the gap look shorter by however late
    // the message before it was read; an instant replay would show none.
    assert!(
        replayed + Duration::from_millis(50) >= original,
        "the long gap is waited out: {replayed:?} for {original:?}"
    );
}

#[test]
fn a_bad_replay_profile_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "bad",
        &replay("duration = \"1s\"\nrate = 10\nsubjects = 1\ninstant = [\"last_per_subject\"]\n"),
    );
    let output = common::run(common::jsbench().args(["run", &profile.display().to_string()]));
    let (_, stderr) = common::text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("scenario[0].subjects"), "{stderr}");
    assert!(stderr.contains("subjects >= 2"), "{stderr}");
}
