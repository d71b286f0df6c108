//! The scheduled scenario against a real server: `@at`, `@every`, cron and
//! a burst fire once each, none early, none lost, the fired `@at`
//! schedules gone; and (through `jsbench run`, on a server it starts and
//! kills) `@at` schedules due while the server is down fire once after it
//! restarts on its store.

mod common;

use common::{assert_all_passed, jsbench, metric, run, run_profile, text};
use jsbench::results::summary::VariantReport;

fn invariant_state(v: &VariantReport, name: &str) -> (bool, bool) {
    let i = v
        .invariants
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("{} has no invariant {name}", v.name));
    (i.passed, i.applicable)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_fires_once_on_time_and_nothing_is_lost() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "scheduled",
        "[[scenario]]\nkind = \"scheduled\"\nduration = \"2s\"\nschedules = 20\n\
         burst = 300\nlead = \"1s\"\nevery = \"1s\"\ncron_step = 1\ngrace = \"3s\"\n",
    )
    .await;
    assert_all_passed(&summary);
    let variants: Vec<&VariantReport> = summary.variants().map(|(_, v)| v).collect();
    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["at", "every", "cron", "burst"]);
    let [at, every, cron, burst] = variants[..] else {
        unreachable!()
    };
    assert_eq!(metric(at, "firings"), 20.0);
    assert_eq!(metric(burst, "firings"), 300.0);
    assert!(metric(burst, "firing_rate") > 0.0);
    // Two seconds watched at one firing a second: at least two each.
    for v in [every, cron] {
        assert!(metric(v, "firings") >= 40.0, "{}", v.name);
        assert_eq!(
            invariant_state(v, "a fired @at schedule is removed"),
            (true, false),
            "not applicable to repeating schedules"
        );
    }
    for v in &variants {
        // Structural: never early, and a firing comes within the grace.
        assert!(metric(v, "firing_error.max") < 3_000_000.0, "{}", v.name);
        assert!(
            metric(v, "receipt_error.p50") >= metric(v, "firing_error.p50"),
            "{}: received after stored",
            v.name
        );
    }
}

#[test]
fn at_schedules_due_during_an_outage_fire_once_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let profile = common::profile(
        dir.path(),
        "scheduled-restart",
        "[[scenario]]\nkind = \"scheduled\"\nduration = \"1s\"\nvariants = [\"restart\"]\n\
         schedules = 20\nlead = \"1s\"\ndown_for = \"2s\"\ngrace = \"5s\"\n",
    );
    let out_dir = dir.path().join("results");
    let out = run(jsbench()
        .args(["run", profile.to_str().unwrap()])
        .args(["--progress", "never", "-o"])
        .arg(&out_dir)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("TMPDIR", &tmp));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary = common::summary(&common::results_dir(&out_dir));
    assert_all_passed(&summary);
    let v = summary.variants().map(|(_, v)| v).next().unwrap();
    assert_eq!(v.name, "restart");
    assert_eq!(metric(v, "firings"), 20.0);
    assert!(metric(v, "down") >= 2_000.0);
    // Every missed firing came after the server was back, none before.
    assert!(metric(v, "catch_up_first") >= 0.0);
    assert!(metric(v, "catch_up_last") >= metric(v, "catch_up_first"));
    assert_eq!(
        invariant_state(v, "the server was killed and came back"),
        (true, true)
    );
}
