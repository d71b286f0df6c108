//! `jsbench ab-side` through its client, `SideProcess`, against a server
//! of the test's own: turns of one scenario in one warm process, an
//! unknown scenario refused without ending the side, nothing left behind
//! after `quit`, a stop mid-turn, bad input, and an older build (one
//! without the subcommand) recognised so that ab can run slices for it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jsbench::ab::slice::{Side, SliceError, SliceTarget};
use jsbench::ab::window::SideProcess;
use jsbench::record::histogram::Recorder;
use jsbench::server::EmbeddedServer;
use tokio_util::sync::CancellationToken;

const DURATION: Duration = Duration::from_millis(300);
const WARMUP: Duration = Duration::from_millis(100);

fn side(jsbench: &Path, server: &EmbeddedServer) -> Side {
    Side {
        role: "base",
        jsbench: jsbench.to_path_buf(),
        server: None,
        target: SliceTarget::Started {
            urls: server.url().to_string(),
            monitor: None,
            pids: vec![server.pid()],
        },
    }
}

fn this_build() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jsbench"))
}

/// Streams in the server's account now.
async fn streams(server: &EmbeddedServer) -> usize {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.query_account().await.unwrap().streams
}

async fn start(
    jsbench: &Path,
    server: &EmbeddedServer,
    profile: &Path,
    log: &Path,
) -> Option<SideProcess> {
    SideProcess::start(
        &side(jsbench, server),
        &[profile.to_path_buf()],
        log,
        None,
        &CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("the side did not start: {e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_warm_process_answers_turn_after_turn_and_cleans_up_on_quit() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "lat",
        &common::latency_body("[200]", "300ms", "100ms", ""),
    );
    let log = dir.path().join("side.log");
    let started = Instant::now();
    let mut side = start(&this_build(), &server, &profile, &log)
        .await
        .expect("this build knows ab-side");
    eprintln!("side ready after {:.2}s", started.elapsed().as_secs_f64());
    assert_eq!(
        side.scenarios(),
        &[("lat".to_string(), "latency".to_string())]
    );

    let limit = Duration::from_secs(60);
    let stop = CancellationToken::new();
    let mut overheads = Vec::new();
    for n in 1..=3 {
        let (turn, elapsed) = side
            .turn("lat", "latency", limit, &stop)
            .await
            .unwrap_or_else(|e| panic!("turn {n}: {e:#}"));
        let summary = &turn.summary;
        assert_eq!(summary.verdict, "passed", "turn {n}: {summary:#?}");
        assert_eq!(summary.run.profile.name, "lat");
        assert_eq!(summary.scenarios.len(), 1);
        let scenario = &summary.scenarios[0];
        assert_eq!(scenario.name, "latency");
        assert_eq!(scenario.variants.len(), 1);
        let variant = &scenario.variants[0];
        assert_eq!(variant.name, "rate-200");
        assert!(common::metric(variant, "e2e_latency.p50") > 0.0);
        // The server's CPU from /proc, through the pid ab hands the side.
        // Present, not positive: /proc counts in 10 ms ticks, and 200
        // messages a second beside two busy cores can take under one.
        assert!(common::metric(variant, "server_cpu_per_msg") >= 0.0);
        let method = variant.params["server_cpu_method"]
            .as_str()
            .unwrap_or_default();
        assert!(method.starts_with("process accounting (/proc)"), "{method}");
        assert!(!variant.invariants.is_empty());
        common::assert_all_passed(summary);
        let text = turn
            .histograms
            .get("latency/rate-200/e2e_latency")
            .unwrap_or_else(|| panic!("no e2e histogram: {:?}", turn.histograms.keys()));
        let histogram = Recorder::from_base64(text).unwrap();
        assert!(histogram.count() > 0);
        let reported = variant
            .histograms
            .iter()
            .find(|h| h.name == "e2e_latency")
            .unwrap();
        assert_eq!(reported.count, histogram.count());
        let overhead = elapsed.saturating_sub(DURATION + WARMUP);
        // The variant's own time (provision, lead-in, drive, drain,
        // delete) against the turn's: the rest is the side's and the
        // protocol's.
        eprintln!(
            "turn {n}: {:.3}s for {}ms of duration+warmup: {:.3}s beyond them \
             (the variant took {:.3}s of the turn)",
            elapsed.as_secs_f64(),
            (DURATION + WARMUP).as_millis(),
            overhead.as_secs_f64(),
            variant.elapsed_s
        );
        overheads.push(overhead);
    }
    eprintln!("per-turn overhead: {overheads:?}");

    let unknown = side
        .turn("lat", "no-such", limit, &stop)
        .await
        .expect_err("no such scenario");
    let message = format!("{unknown:#}");
    assert!(
        message.contains("no-such") && message.contains("latency"),
        "{message}"
    );
    let after = side.turn("lat", "latency", limit, &stop).await;
    assert_eq!(
        after.unwrap_or_else(|e| panic!("{e:#}")).0.summary.verdict,
        "passed"
    );

    side.quit().await.unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(streams(&server).await, 0, "quit left streams behind");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("rate-200"), "the table goes to the log: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_mid_turn_interrupts_the_side_which_cleans_up() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "long",
        &common::latency_body("[100]", "30s", "100ms", ""),
    );
    let log = dir.path().join("side.log");
    let mut side = start(&this_build(), &server, &profile, &log).await.unwrap();
    let stop = CancellationToken::new();
    let canceller = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let e = side
        .turn("long", "latency", Duration::from_secs(120), &stop)
        .await
        .expect_err("stopped");
    assert!(
        matches!(
            e.downcast_ref::<SliceError>(),
            Some(SliceError::Interrupted)
        ),
        "{e:#}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the 30 s scenario was cut short: {:?}",
        started.elapsed()
    );
    assert_eq!(streams(&server).await, 0, "an interrupted side cleans up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_its_limit_is_interrupted_and_says_so() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "long",
        &common::latency_body("[100]", "30s", "100ms", ""),
    );
    let log = dir.path().join("side.log");
    let mut side = start(&this_build(), &server, &profile, &log).await.unwrap();
    let e = side
        .turn(
            "long",
            "latency",
            Duration::from_secs(2),
            &CancellationToken::new(),
        )
        .await
        .expect_err("past its limit");
    let message = format!("{e:#}");
    assert!(
        matches!(
            e.downcast_ref::<SliceError>(),
            Some(SliceError::TimedOut(_))
        ),
        "{message}"
    );
    assert!(message.contains("interrupted"), "{message}");
    assert_eq!(streams(&server).await, 0);
}

#[tokio::test]
async fn bad_input_fails_before_ready_as_run_would_fail_it() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "bad",
        "[[scenario]]\nkind = \"latency\"\nrats = [100]\n",
    );
    let e = SideProcess::start(
        &side(&this_build(), &server),
        &[profile],
        &dir.path().join("side.log"),
        None,
        &CancellationToken::new(),
    )
    .await
    .err()
    .expect("a bad profile is refused");
    let message = format!("{e:#}");
    assert!(message.contains("rats"), "{message}");
    assert_eq!(jsbench::cli::exit_code(&e), 2, "{message}");
}

#[tokio::test]
async fn a_build_without_ab_side_is_none_so_ab_runs_slices() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("jsbench");
    std::fs::write(
        &old,
        "#!/bin/sh\necho \"error: unrecognized subcommand '$1'\" >&2\necho >&2\necho 'Usage: jsbench <COMMAND>' >&2\nexit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    let profile = common::profile(
        dir.path(),
        "lat",
        &common::latency_body("[200]", "300ms", "100ms", ""),
    );
    let started = SideProcess::start(
        &side(&old, &server),
        &[profile],
        &dir.path().join("side.log"),
        None,
        &CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(started.is_none());
}
