//! The ttl scenario against a real server (ADR-43): mixed TTLs expire
//! after their deadlines and not before, markers are accounted for, the
//! late reader gets what has not expired, max_age caps a longer TTL and
//! "never" outlives it, the cost variant weighs the server; and a stream
//! limit that removes messages early is caught and blamed on the server.
//! A few seconds of load each: every deadline is 2 to 5 s out.

mod common;

use common::{assert_all_passed, metric, run_profile};

/// Runs a profile body against `server` with its pid given, so the cost
/// variant can read the server's memory and CPU.
async fn run_weighed(
    server: &jsbench::server::EmbeddedServer,
    name: &str,
    body: &str,
) -> jsbench::results::summary::Summary {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(dir.path(), name, body);
    let mut options = common::options(server.url(), &profile, dir.path());
    options.server_pids = vec![server.pid()];
    let outcome = jsbench::run::run(options, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    common::summary(&outcome.results[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_ttls_expire_after_their_deadlines_with_every_marker_accounted_for() {
    let server = common::server();
    // 12 subjects, TTLs round-robin by message: subjects 2, 5, 8 and 11
    // hold only "never" messages, the other 8 only expiring ones.
    let summary = run_weighed(
        &server,
        "ttl",
        "[[scenario]]\nkind = \"ttl\"\nmessages = 120\nrate = 200\nsubjects = 12\n\
         ttls = [\"2s\", \"5s\", \"never\"]\nmarkers = [\"off\", \"1s\"]\n\
         cost_messages = 3000\ncost_ttl = \"5s\"\n",
    )
    .await;
    assert_all_passed(&summary);
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["markers-off", "markers-1s", "cost"]);
    for v in &variants[..2] {
        assert_eq!(metric(v, "published"), 120.0);
        assert_eq!(metric(v, "expired_seen"), 80.0, "{}", v.name);
        // Structural: seen gone, and within the 5 s the watch gives up
        // after (the server's expiry pass runs about every 250 ms).
        let max = metric(v, "expiry_lag.max");
        assert!(max > 0.0 && max < 5e6, "{}: {max} µs", v.name);
        // The late reader started between the 2 s and 5 s deadlines: the
        // 40 "never" and the 40 5 s messages were owed to it.
        assert!(metric(v, "late_reader_delivered") >= 80.0, "{}", v.name);
        for i in &v.invariants {
            assert!(
                i.applicable || i.name == "every marker accounted for",
                "{i:?}"
            );
        }
    }
    assert_eq!(
        metric(variants[1], "markers_seen"),
        8.0,
        "one per expiring subject"
    );
    assert!(metric(variants[1], "marker_delay.p50") < 5e6);
    let cost = variants[2];
    assert_eq!(cost.invariants.len(), 2, "{:?}", cost.invariants);
    for m in [
        "server_bytes_per_plain_msg",
        "server_bytes_per_ttl_msg",
        "expiry_cpu_per_msg",
    ] {
        assert!(metric(cost, m) >= 0.0, "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_caps_a_longer_ttl_and_never_outlives_it() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "age",
        "[[scenario]]\nkind = \"ttl\"\nmessages = 40\nrate = 200\nsubjects = 4\n\
         ttls = [\"30s\", \"never\"]\n\
         [scenario.stream]\nmax_age = \"2s\"\n",
    )
    .await;
    assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    // Gone at max_age, not at 30 s (the watch would have given up).
    assert_eq!(metric(v, "expired_seen"), 20.0);
    assert!(metric(v, "expiry_lag.max") < 5e6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_limit_that_removes_messages_early_is_reported_as_the_servers() {
    let server = common::server();
    // One message per subject: every earlier one goes long before its TTL.
    let summary = run_profile(
        &server,
        "early",
        "[[scenario]]\nkind = \"ttl\"\nmessages = 20\nrate = 200\nsubjects = 2\n\
         ttls = [\"2s\"]\nlate_reader = false\n\
         [scenario.stream]\nmax_msgs_per_subject = 1\n",
    )
    .await;
    let (_, v) = summary.variants().next().unwrap();
    let early = v
        .invariants
        .iter()
        .find(|i| i.name == "nothing removed before its deadline")
        .unwrap();
    assert!(!early.passed, "{early:?}");
    assert!(
        early
            .detail
            .contains("the server removed 18 of 20 messages early"),
        "{}",
        early.detail
    );
}
