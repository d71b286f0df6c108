//! The latency scenario end to end against a real server: every message
//! accounted for, histograms holding exactly the measured window.

mod common;

use std::time::Duration;

use jsbench::run::{RunOptions, run};
use tokio_util::sync::CancellationToken;

fn options(server: &str, profile: std::path::PathBuf, out: &std::path::Path) -> RunOptions {
    common::options(server, &profile, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_accounted_for_and_only_the_window_is_recorded() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    // 200 msg/s for 0.5 s of warm-up and 1 s measured: 300 messages, of
    // which the 200 intended after the warm-up are recorded.
    let body = common::latency_body("[200, 400]", "1s", "500ms", "");
    let profile = common::profile(dir.path(), "acct", &body);
    let outcome = run(
        options(server.url(), profile, dir.path()),
        CancellationToken::new(),
    )
    .await
    .expect("run succeeds");
    assert!(outcome.passed, "invariants failed");
    assert_eq!(outcome.exit_code(), 0);

    let summary = common::summary(&outcome.results[0]);
    assert_eq!(summary.verdict, "passed");
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    assert_eq!(variants.len(), 2);
    for (v, rate) in variants.iter().zip([200u64, 400]) {
        let total = rate * 3 / 2;
        let measured = rate;
        let l = &v.ledger;
        assert_eq!(l.published, total, "{}", v.name);
        assert_eq!(l.persisted, total, "{}", v.name);
        assert_eq!(l.delivered, total, "{}", v.name);
        assert_eq!(l.deliveries, total, "{}", v.name);
        assert_eq!(l.acked, total, "{}", v.name);
        assert_eq!(
            (l.lost, l.redelivered, l.duplicates, l.publish_errors),
            (0, 0, 0, 0)
        );
        for h in &v.histograms {
            assert_eq!(h.count, measured, "{} {}", v.name, h.name);
        }
        assert!(v.invariants.iter().all(|i| i.passed), "{:?}", v.invariants);
        assert!(v.invariants.iter().any(|i| i.name == "lost = 0"));
        // Without ids the server can flag no duplicate: not applicable,
        // never a pass. Acks against deliveries are jsbench's own counts.
        let check = |name: &str| v.invariants.iter().find(|i| i.name == name).unwrap();
        assert!(!check("no duplicates flagged").applicable);
        assert_eq!(check("no duplicates flagged").state(), "not applicable");
        assert!(check("every delivery acked").client_side);
        assert!(check("lost = 0").applicable && !check("lost = 0").client_side);
        let e2e = v.metric("e2e_latency.p50").unwrap().value;
        let max = v.metric("e2e_latency.max").unwrap().value;
        assert!(e2e > 0.0 && e2e <= max, "p50 {e2e} max {max}");
        let target = v.metric("target_rate").unwrap().value;
        assert_eq!(target, rate as f64);
        // Each message split where the server stamped it: both hops
        // measured, and their means add up to the end-to-end mean (no
        // interval clamped below zero; the same messages on both sides).
        let hop = |name: &str| common::metric(v, name);
        assert!(
            hop("ingest_latency.p50") > 0.0 && hop("deliver_latency.p50") > 0.0,
            "{} {}",
            hop("ingest_latency.p50"),
            hop("deliver_latency.p50")
        );
        let means = hop("hops_mean_sum_ratio");
        assert!((means - 1.0).abs() <= 0.01, "means add up to {means}");
        // A generator that fell behind is the machine's load, said in
        // the results; any other warning is the run's.
        let fell_behind = jsbench::scenario::schedule::FELL_BEHIND;
        let others: Vec<_> = v
            .warnings
            .iter()
            .filter(|w| !w.starts_with(fell_behind))
            .collect();
        assert!(others.is_empty(), "{others:?}");
        let published: u64 = v.timelines["published"].counts.iter().sum();
        assert_eq!(published, total);
        // What the ledgers cost: a publisher's shard and a consumer's,
        // in chunks of 4,096 sequences, and their merge.
        // A run this short holds open chunks only: a fixed cost, read here
        // as a total (a few 8 KB chunks per event and shard at most).
        let ledger = v.metric("ledger_bytes_per_msg").unwrap().value;
        let held = ledger * v.ledger.persisted as f64;
        assert!(
            ledger > 0.0 && held < 256.0 * 1024.0,
            "{ledger} bytes a message, {held} in all"
        );
        // Both roles' CPU read from their own threads, within the whole
        // process's (a server the test started gives no CPU reading
        // without --monitor: its figure and the share are absent).
        let cpu = |name: &str| v.metric(name).unwrap_or_else(|| panic!("{name}")).value;
        let (client, publisher, consumer) = (
            cpu("client_cpu_per_msg"),
            cpu("publisher_cpu_per_msg"),
            cpu("consumer_cpu_per_msg"),
        );
        assert!(publisher > 0.0 && consumer > 0.0, "{publisher} {consumer}");
        assert!(
            publisher + consumer <= client * 1.05,
            "{publisher} + {consumer} > {client}"
        );
        assert!(v.metric("server_cpu_per_msg").is_none());
        assert!(v.metric("client_cpu_share").is_none());
    }
    let rss = summary.run.peak_rss.expect("peak RSS recorded");
    assert!(rss > 1 << 20, "{rss} bytes");
    assert_eq!(
        summary.run.client_threads,
        Some(jsbench::system::runtimes::threads())
    );
    assert!(summary.run.ledger_bytes_per_msg.is_some());
    // The streams are gone: nothing left behind on the server.
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let account = js.query_account().await.unwrap();
    assert_eq!(account.streams, 0, "streams left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_publishers_and_consumers_share_the_load_without_loss() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let body = common::latency_body(
        "[600]",
        "1s",
        "0s",
        "publishers = 3\nmsg_id = \"unique\"\nmessage_size = 64\n[scenario.consumer]\nconsumers = 2\nbatch = 50\n",
    );
    let profile = common::profile(dir.path(), "share", &body);
    let outcome = run(
        options(server.url(), profile, dir.path()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let summary = common::summary(&outcome.results[0]);
    let (_, v) = summary.variants().next().unwrap();
    assert!(outcome.passed, "{:#?}", v.invariants);
    assert_eq!(v.ledger.persisted, 600);
    assert_eq!(v.ledger.delivered, 600);
    assert_eq!(v.ledger.duplicates, 0, "unique ids are never duplicates");
    assert_eq!(v.params["publishers"], 3);
    assert_eq!(v.params["msg_id"], "unique");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_leaves_the_streams_and_records_them() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "keep",
        &common::latency_body("[100]", "200ms", "0s", ""),
    );
    let mut opts = options(server.url(), profile, dir.path());
    opts.keep = true;
    let outcome = run(opts, CancellationToken::new()).await.unwrap();
    let summary = common::summary(&outcome.results[0]);
    assert_eq!(summary.run.kept_streams.len(), 1);
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(&summary.run.kept_streams[0]).await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_keeps_what_it_measured() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "cancel",
        &common::latency_body("[500]", "30s", "0s", ""),
    );
    let stop = CancellationToken::new();
    let canceller = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        canceller.cancel();
    });
    let started = std::time::Instant::now();
    let outcome = run(options(server.url(), profile, dir.path()), stop)
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "stopped promptly"
    );
    assert!(outcome.interrupted);
    assert_eq!(outcome.exit_code(), 130);
    let summary = common::summary(&outcome.results[0]);
    assert_eq!(summary.verdict, "interrupted");
    let (_, v) = summary.variants().next().unwrap();
    assert!(v.ledger.published > 100, "{:?}", v.ledger);
    assert!(v.ledger.published < 15_000, "{:?}", v.ledger);
    assert_eq!(
        v.ledger.lost, 0,
        "in-flight messages drained: {:?}",
        v.ledger
    );
    assert!(
        v.warnings.iter().any(|w| w.contains("interrupted")),
        "{:?}",
        v.warnings
    );
}

/// Coordinated omission, corrected: a server that stops for 400 ms fills
/// the PubAck window, the sender stalls, and the messages due meanwhile go
/// out late. Their latency from the intended send carries the stall; from
/// the actual send it does not, as a closed-loop tool would report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_sender_shows_in_latency_from_the_intended_send_only() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "stall",
        &common::latency_body("[1000]", "3s", "0s", "pub_ack_window = 16\n"),
    );
    let pid = server.pid() as libc::pid_t;
    let stall = std::time::Duration::from_millis(400);
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        // SAFETY: signals to the server process this test started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        tokio::time::sleep(stall).await;
        unsafe { libc::kill(pid, libc::SIGCONT) };
    });
    let outcome = jsbench::run::run(
        options(server.url(), profile, dir.path()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    stopper.await.unwrap();
    let summary = common::summary(&outcome.results[0]);
    let (_, v) = summary.variants().next().unwrap();
    let us = |name: &str| common::metric(v, name);
    let stall_us = stall.as_micros() as f64;
    // About 400 of 3,000 messages were due during the stall: a tenth of
    // them waited at least 100 ms before they could even be sent.
    assert!(
        us("pub_ack_latency.p90") >= 50_000.0,
        "intended p90 {}",
        us("pub_ack_latency.p90")
    );
    assert!(
        us("pub_ack_latency.max") >= us("pub_ack_latency_actual.p99") + 0.75 * stall_us,
        "intended max {} against actual p99 {}",
        us("pub_ack_latency.max"),
        us("pub_ack_latency_actual.p99")
    );
    // From the actual send only the window's 16 waited: the stall hides.
    assert!(
        us("pub_ack_latency_actual.p90") < 10_000.0,
        "actual p90 {}",
        us("pub_ack_latency_actual.p90")
    );
    assert!(
        us("send_lag.max") >= 0.75 * stall_us,
        "the sender says it fell behind: {}",
        us("send_lag.max")
    );
    assert!(outcome.passed, "nothing lost through the stall");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_baseline_runs_the_same_schedule_without_a_stream() {
    let server = common::server();
    let body = common::latency_body("[500]", "1s", "0s", "core_baseline = true\n");
    let summary = common::run_profile(&server, "core", &body).await;
    common::assert_all_passed(&summary);
    let variants: Vec<&jsbench::results::summary::VariantReport> =
        summary.variants().map(|(_, v)| v).collect();
    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["rate-500", "core-500"]);
    let (js, core) = (variants[0], variants[1]);
    // The same schedule: as many messages, each received once.
    assert_eq!(core.ledger.published, js.ledger.published);
    assert_eq!(core.ledger.delivered, core.ledger.published);
    assert!(core.streams.is_empty(), "no stream: {:?}", core.streams);
    assert!(!js.streams.is_empty());
    assert!(common::metric(core, "e2e_latency.p50") > 0.0);
    let held = |name: &str| core.invariants.iter().find(|i| i.name == name).unwrap();
    assert!(held("every message received once").passed);
    assert!(!held("stream holds every persisted message").applicable);
    assert!(!held("lost = 0").applicable);
}

/// Every latency is also in an HdrHistogram interval log, one interval per
/// second, that the hdrhistogram crate's own reader reads back: the
/// intervals add up to the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_logs_read_back_and_add_up_to_the_whole() {
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let body = common::latency_body("[1000]", "3s", "0s", "");
    let profile = common::profile(dir.path(), "hlog", &body);
    let outcome = jsbench::run::run(
        common::options(server.url(), &profile, dir.path()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let folder = &outcome.results[0];
    let summary = common::summary(folder);
    let (_, v) = summary.variants().next().unwrap();
    for name in ["e2e_latency", "pub_ack_latency", "send_lag"] {
        let h = v.histograms.iter().find(|h| h.name == name).unwrap();
        let file = h.hlog_file.as_ref().expect("an interval log");
        let log = std::fs::read(folder.join(file)).unwrap();
        let mut total = 0u64;
        let mut intervals = 0;
        for entry in IntervalLogIterator::new(&log) {
            if let LogEntry::Interval(i) = entry.unwrap() {
                assert_eq!(i.duration(), std::time::Duration::from_secs(1));
                let bytes = base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    i.encoded_histogram(),
                )
                .unwrap();
                let hist: hdrhistogram::Histogram<u64> =
                    Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
                total += hist.len();
                intervals += 1;
            }
        }
        assert_eq!(total, h.count, "{name}: the intervals hold every value");
        assert!((3..=5).contains(&intervals), "{name}: {intervals} seconds");
    }
    let p99 = &v.timelines["e2e_latency.p99_us"];
    assert!(
        p99.counts.len() >= 3 && p99.counts.iter().all(|&us| us > 0),
        "{p99:?}"
    );
    // report.html draws them.
    let page = std::fs::read_to_string(folder.join("report.html")).unwrap();
    assert!(page.contains("End-to-end p99 per second"));
}

/// A load that steps: each step's latency on its own, from the seconds its
/// messages were meant to be sent in (the schedule starts on a whole
/// second so they line up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_profile_reports_each_steps_latency() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let body = "[[scenario]]\nkind = \"latency\"\nduration = \"2s\"\n\
                arrival = { pattern = \"steps\", steps = [{ rate = 500, for = \"1s\" }, \
                { rate = 2000, for = \"1s\" }] }\n";
    let profile = common::profile(dir.path(), "steps", body);
    let outcome = jsbench::run::run(
        common::options(server.url(), &profile, dir.path()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let summary = common::summary(&outcome.results[0]);
    common::assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    assert_eq!(v.name, "steps");
    assert_eq!(v.ledger.published, 2_500);
    assert!(common::metric(v, "step1.e2e_latency.p99") > 0.0);
    assert!(common::metric(v, "step2.e2e_latency.p99") > 0.0);
    let table =
        std::fs::read_to_string(outcome.results[0].join(v.parts_file.as_ref().unwrap())).unwrap();
    let mut rows = csv::Reader::from_reader(table.as_bytes());
    // (rate, latencies counted, slowest latency in seconds) per step.
    let steps: Vec<(f64, f64, f64)> = rows
        .records()
        .map(|r| {
            let r = r.unwrap();
            let field = |i: usize| r[i].parse::<f64>().unwrap();
            (field(2), field(4), field(7) / 1e6)
        })
        .collect();
    assert_eq!(steps.len(), 2, "{table}");
    // A message belongs to the step it was meant to be sent in, however
    // late it arrived: every step holds exactly its rate times its length
    // (by receipt, a step lost to the next the messages sent within its
    // slowest latency of its end), and none is warned short.
    let (one, two) = (steps[0], steps[1]);
    assert_eq!((one.1, two.1), (500.0, 2000.0), "{table}");
    assert!(
        !v.warnings.iter().any(|w| w.starts_with("step ")),
        "{:?}",
        v.warnings
    );
}

/// `trace_every`: every tenth message carries `Nats-Trace-Dest`, the
/// server's events for every one of them come back, and the hops they
/// give are measured and add up near the stamp-based ingest hop (one
/// server: `js` is taken where the stored stamp is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sampled_message_is_traced_into_its_hops() {
    let server = common::server();
    let body = common::latency_body("[200]", "1s", "200ms", "trace_every = 10\n");
    let summary = common::run_profile(&server, "traced", &body).await;
    let (_, v) = summary.variants().next().unwrap();
    assert!(v.invariants.iter().all(|i| i.passed), "{:?}", v.invariants);
    let check = v
        .invariants
        .iter()
        .find(|i| i.name == "every sampled message traced")
        .expect("the check");
    assert!(check.applicable, "{check:?}");
    // 240 messages, numbers 0..240: every tenth.
    assert_eq!(common::metric(v, "trace_sampled"), 24.0);
    for hop in ["trace_client_to_ingress", "trace_ingress_to_stored"] {
        let p50 = common::metric(v, &format!("{hop}.p50"));
        assert!(p50 > 0.0, "{hop} {p50}");
    }
    assert!(
        v.metric("trace_route.p50").is_none(),
        "one server: no route"
    );
    let ratio = common::metric(v, "trace_sum_vs_ingest");
    assert!(ratio > 0.3 && ratio < 3.0, "{ratio}");
}
