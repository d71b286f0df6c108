//! `jsbench compare` and repetitions as users and CI meet them: exit
//! statuses on made-up summaries, and a small repeated run against a real
//! server compared with itself.

mod common;

use std::path::{Path, PathBuf};

use common::{jsbench, run, text};
use serde_json::{Value, json};

/// A summary of profile "ci" with one variant: e2e p50 and publish rate
/// from three repetitions each, and whether `lost = 0` held.
fn summary(p50: [f64; 3], rate: [f64; 3], lost_held: bool) -> Value {
    let metric = |name: &str, unit: &str, direction: &str, reps: [f64; 3]| {
        let mut sorted = reps;
        sorted.sort_by(f64::total_cmp);
        let median = sorted[1];
        let mut deviations = reps.map(|r| (r - median).abs());
        deviations.sort_by(f64::total_cmp);
        json!({
            "name": name, "unit": unit, "value": median, "direction": direction,
            "repetitions": reps,
            "spread": {"min": sorted[0], "max": sorted[2], "mad": deviations[1]},
        })
    };
    json!({
        "schema_version": 1,
        "run": {
            "id": "r", "started_at": "t", "finished_at": "t",
            "tool": {"name": "jsbench", "version": "0.1.0", "git_commit": "0123456789", "git_dirty": false},
            "server": {"mode": "embedded", "version": "2.15.1", "urls": "nats://127.0.0.1:1",
                       "server_name": "s", "cluster": null, "jetstream_domain": null,
                       "storage": "file", "replicas": 1},
            "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": null,
                     "cpu_model": "cpu", "hostname": "h"},
            "profile": {"name": "ci", "source": "ci", "description": "", "text": "name = \"ci\"\n"},
            "repeat": 3,
        },
        "scenarios": [{
            "name": "latency", "kind": "latency",
            "variants": [{
                "name": "rate-1000", "passed": lost_held, "params": {},
                "metrics": [
                    {"name": "target_rate", "unit": "msg/s", "value": 1000.0, "direction": "none"},
                    metric("publish_rate", "msg/s", "higher", rate),
                    metric("e2e_latency.p50", "us", "lower", p50),
                ],
                "histograms": [],
                "ledger": {"published": 3000, "publish_errors": 0, "persisted": 3000,
                           "persisted_twice": 0, "duplicates": 0, "delivered": 3000,
                           "deliveries": 3000, "redelivered": 0, "redeliveries": 0,
                           "acked": 3000, "lost": if lost_held { 0 } else { 2 },
                           "delivered_unconfirmed": 0},
                "invariants": [{
                    "name": "lost = 0", "passed": lost_held,
                    "detail": if lost_held { "0 (expected 0)" } else { "failed in repetition 3 of 3: 2 (expected 0)" },
                }],
                "warnings": [], "timelines": {}, "error": null, "elapsed_s": 3.0,
            }],
        }],
        "verdict": if lost_held { "passed" } else { "failed" },
    })
}

const P50: [f64; 3] = [200.0, 205.0, 210.0];
const RATE: [f64; 3] = [1000.0, 999.0, 1001.0];

fn write(dir: &Path, name: &str, summary: &Value) -> PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("summary.json"),
        serde_json::to_vec_pretty(summary).unwrap(),
    )
    .unwrap();
    folder
}

fn compare(base: &Path, new: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = run(jsbench().arg("compare").arg(base).arg(new).args(extra));
    let (stdout, stderr) = text(&out);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stdout, stderr)
}

#[test]
fn compare_exits_0_inside_noise_1_on_a_regression_or_lost_message_2_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(dir.path(), "base", &summary(P50, RATE, true));

    // 30% slower at the median, but one repetition is as fast as BASE's slowest.
    let noisy = write(
        dir.path(),
        "noisy",
        &summary([208.0, 265.0, 270.0], RATE, true),
    );
    let (code, stdout, _) = compare(&base, &noisy, &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("within noise"), "{stdout}");

    let slower = write(
        dir.path(),
        "slower",
        &summary([260.0, 265.0, 270.0], RATE, true),
    );
    let (code, stdout, _) = compare(&base, &slower, &[]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("REGRESSED"), "{stdout}");
    // A threshold above the change lets it pass; the summary.json path works too.
    let (code, stdout, _) = compare(&base.join("summary.json"), &slower, &["--threshold", "40%"]);
    assert_eq!(code, Some(0), "{stdout}");

    let lost = write(dir.path(), "lost", &summary(P50, RATE, false));
    let (code, stdout, _) = compare(&base, &lost, &["--format", "markdown"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.starts_with("### jsbench compare: FAILED"),
        "{stdout}"
    );
    assert!(stdout.contains("failed in repetition 3 of 3"), "{stdout}");
    let (code, _, _) = compare(&base, &lost, &["--fail-on", "invariants"]);
    assert_eq!(
        code,
        Some(1),
        "a lost message fails whatever --fail-on says"
    );

    let (code, stdout, _) = compare(&base, &slower, &["--format", "json"]);
    assert_eq!(code, Some(1));
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["result"], "regression");

    // Unusable input: exit 2, and the message names what is wrong.
    let (code, _, stderr) = compare(&base, &dir.path().join("nowhere"), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("NEW: no results folder"), "{stderr}");

    let mut other = summary(P50, RATE, true);
    other["run"]["profile"]["name"] = json!("quick");
    let other = write(dir.path(), "other", &other);
    let (code, _, stderr) = compare(&base, &other, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("different profiles"), "{stderr}");

    let mut future = summary(P50, RATE, true);
    future["schema_version"] = json!(2);
    let future = write(dir.path(), "future", &future);
    let (code, _, stderr) = compare(&base, &future, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("schema version 2"), "{stderr}");

    let (code, _, stderr) = compare(&base, &slower, &["--threshold", "lots"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--threshold"), "{stderr}");
}

#[test]
fn a_repeated_run_keeps_every_repetition_and_matches_itself() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "twice",
        &format!(
            "repeat = 2\n{}",
            common::latency_body("[300]", "500ms", "0s", "")
        ),
    );
    let out_dir = dir.path().join("out");
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-s",
        ])
        .arg(server.url())
        .arg("-o")
        .arg(&out_dir));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let results = common::results_dir(&out_dir);

    let s = common::summary(&results);
    assert_eq!(s.run.repeat, 2);
    let (_, v) = s.variants().next().unwrap();
    assert_eq!(s.variants().count(), 1, "repetitions fold into one variant");
    assert_eq!(v.repetitions.len(), 2);
    assert!(v.repetitions.iter().all(|r| r.passed && r.ledger.lost == 0));
    assert_eq!(v.ledger.published, 300, "150 messages in each repetition");
    for m in &v.metrics {
        assert_eq!(m.repetitions.len(), 2, "{}", m.name);
        let spread = m
            .spread
            .unwrap_or_else(|| panic!("{} has no spread", m.name));
        assert!(spread.min <= m.value && m.value <= spread.max, "{m:?}");
        let mean = (m.repetitions[0] + m.repetitions[1]) / 2.0;
        assert!((m.value - mean).abs() <= 1e-9 * mean.abs(), "{m:?}");
    }
    for h in &v.histograms {
        assert_eq!(h.count, 300, "{} pools both repetitions", h.name);
    }

    for file in [
        "customBiggerIsBetter.json",
        "customSmallerIsBetter.json",
        "bencher.json",
    ] {
        let path = results.join("ci").join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert!(text.contains("latency/rate-300/"), "{file}: {text}");
    }
    let bencher: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("ci/bencher.json")).unwrap())
            .unwrap();
    let p50 = &bencher["latency/rate-300/e2e_latency.p50"]["latency"];
    let p50_us = v.metric("e2e_latency.p50").unwrap().value;
    let ns = p50["value"].as_f64().unwrap();
    assert!(
        (ns - p50_us * 1000.0).abs() < 1e-6 * ns,
        "{p50} vs {p50_us} us"
    );

    // `report` writes the CI files again from summary.json alone.
    std::fs::remove_dir_all(results.join("ci")).unwrap();
    let out = run(jsbench().arg("report").arg(&results));
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(results.join("ci/bencher.json").is_file());

    let (code, stdout, _) = compare(&results, &results, &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("0 regressed"), "{stdout}");
}
