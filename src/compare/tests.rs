//! Comparisons of small made-up summaries: verdicts, failures, refusals and
//! what each format shows.

use std::path::PathBuf;

use super::*;
use crate::record::metrics::Metric;
use crate::record::spread::{Spread, median};
use crate::variant::Invariant;

/// A metric as a run with these repetitions would record it.
fn metric(name: &str, unit: &str, direction: Direction, reps: &[f64]) -> Metric {
    let mut m = Metric::new(name, unit, median(reps).unwrap(), direction);
    if reps.len() > 1 {
        m.repetitions = reps.to_vec();
        m.spread = Spread::of(reps);
    }
    m
}

/// A passing run of profile "ci" with one latency variant.
fn summary(metrics: Vec<Metric>) -> Summary {
    let json = serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "run": {
            "id": "r", "started_at": "t", "finished_at": "t",
            "tool": {"name": "jsbench", "version": "0", "git_commit": "abcdef0123", "git_dirty": false},
            "server": {"mode": "embedded", "version": "2.15.1", "urls": "u", "server_name": "s",
                       "cluster": null, "jetstream_domain": null, "storage": "file", "replicas": 1},
            "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": null,
                     "cpu_model": "cpu", "hostname": "h"},
            "profile": {"name": "ci", "source": "ci", "description": "", "text": "name = \"ci\"\nrepeat = 3\n"},
            "repeat": 3,
        },
        "scenarios": [{
            "name": "latency", "kind": "latency",
            "variants": [{
                "name": "rate-1000", "passed": true, "params": {}, "metrics": metrics,
                "histograms": [], "ledger": crate::record::ledger::LedgerCounts::default(),
                "invariants": [Invariant::equal("lost = 0", 0, 0)], "warnings": [],
                "timelines": {}, "error": null, "elapsed_s": 1.0,
            }],
        }],
        "verdict": "passed",
    });
    serde_json::from_value(json).unwrap()
}

fn standard(p50: &[f64], rate: &[f64]) -> Summary {
    summary(vec![
        metric("target_rate", "msg/s", Direction::None, &[1000.0]),
        metric("publish_rate", "msg/s", Direction::Higher, rate),
        metric("e2e_latency.p50", "us", Direction::Lower, p50),
    ])
}

fn input(role: &'static str, summary: Summary) -> Input {
    Input {
        role,
        path: PathBuf::from(format!("/results/{}", role.to_lowercase())),
        summary,
    }
}

fn judge(base: Summary, new: Summary) -> Comparison {
    compare(
        &input("BASE", base),
        &input("NEW", new),
        &Judged::threshold(0.10),
        FailOn::Regressions,
    )
    .unwrap()
}

fn verdict_of(c: &Comparison, name: &str) -> Verdict {
    c.metrics.iter().find(|m| m.metric == name).unwrap().verdict
}

fn refusal(base: Summary, new: Summary) -> String {
    let e = compare(
        &input("BASE", base),
        &input("NEW", new),
        &Judged::threshold(0.10),
        FailOn::Regressions,
    )
    .unwrap_err();
    assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
    format!("{e:#}")
}

const BASE_P50: [f64; 3] = [200.0, 205.0, 210.0];
const BASE_RATE: [f64; 3] = [1000.0, 999.0, 1001.0];

#[test]
fn identical_runs_are_unchanged_and_exit_0() {
    let c = judge(
        standard(&BASE_P50, &BASE_RATE),
        standard(&BASE_P50, &BASE_RATE),
    );
    assert_eq!(c.exit_code, 0);
    assert_eq!(c.result, "ok");
    assert_eq!(verdict_of(&c, "e2e_latency.p50"), Verdict::Unchanged);
    assert_eq!(verdict_of(&c, "target_rate"), Verdict::Context);
    assert_eq!((c.counts.unchanged, c.counts.context), (2, 1));
}

#[test]
fn a_clear_latency_regression_exits_1() {
    let c = judge(
        standard(&BASE_P50, &BASE_RATE),
        standard(&[250.0, 260.0, 255.0], &BASE_RATE),
    );
    assert_eq!(verdict_of(&c, "e2e_latency.p50"), Verdict::Regressed);
    let m = c.regressions().next().unwrap();
    assert!((m.change.unwrap() - (255.0 - 205.0) / 205.0).abs() < 1e-9);
    assert_eq!(c.exit_code, 1);
    assert_eq!(c.result, "regression");
}

#[test]
fn a_big_change_inside_a_spread_is_noise_and_exits_0() {
    let c = judge(
        standard(&[200.0, 205.0, 300.0], &BASE_RATE),
        standard(&[250.0, 260.0, 255.0], &[700.0, 1000.0, 1300.0]),
    );
    assert_eq!(verdict_of(&c, "e2e_latency.p50"), Verdict::WithinNoise);
    assert_eq!(verdict_of(&c, "publish_rate"), Verdict::Unchanged);
    assert_eq!(c.exit_code, 0);
}

#[test]
fn improvements_exit_0() {
    let c = judge(
        standard(&BASE_P50, &BASE_RATE),
        standard(&[150.0, 151.0, 152.0], &[1200.0, 1210.0, 1190.0]),
    );
    assert_eq!(verdict_of(&c, "e2e_latency.p50"), Verdict::Improved);
    assert_eq!(verdict_of(&c, "publish_rate"), Verdict::Improved);
    assert_eq!(c.exit_code, 0);
}

#[test]
fn a_context_metric_that_moves_is_never_a_regression() {
    let mut new = standard(&BASE_P50, &BASE_RATE);
    new.scenarios[0].variants[0].metrics[0].value = 5000.0;
    let c = judge(standard(&BASE_P50, &BASE_RATE), new);
    assert_eq!(verdict_of(&c, "target_rate"), Verdict::Context);
    assert_eq!(c.exit_code, 0);
}

#[test]
fn invariant_failures_in_new_always_fail_and_come_first() {
    let mut new = standard(&BASE_P50, &BASE_RATE);
    let v = &mut new.scenarios[0].variants[0];
    v.invariants = vec![Invariant::check(
        "lost = 0",
        false,
        "failed in repetition 2 of 3: 3 (expected 0)",
    )];
    v.passed = false;
    new.verdict = "failed".into();
    let c = judge(standard(&BASE_P50, &BASE_RATE), new.clone());
    assert_eq!(c.exit_code, 1);
    assert_eq!(c.result, "invariants failed");
    assert_eq!(c.failures.len(), 1);
    assert_eq!(c.failures[0].check, "lost = 0");
    assert!(c.failures[0].detail.contains("repetition 2"));
    // Even when only invariants may fail the comparison.
    let c = compare(
        &input("BASE", standard(&BASE_P50, &BASE_RATE)),
        &input("NEW", new),
        &Judged::threshold(0.10),
        FailOn::Invariants,
    )
    .unwrap();
    assert_eq!(c.exit_code, 1);

    for format in [Format::Table, Format::Markdown] {
        let text = render::render(&c, format).unwrap();
        let failure = text.find("lost = 0").unwrap();
        let first_metric = text.find("e2e_latency.p50").unwrap();
        assert!(failure < first_metric, "failures first:\n{text}");
        assert!(text.contains("repetition 2 of 3"), "{text}");
    }
}

#[test]
fn a_failed_run_without_a_failed_variant_still_fails() {
    let mut new = standard(&BASE_P50, &BASE_RATE);
    new.verdict = "failed".into();
    let c = judge(standard(&BASE_P50, &BASE_RATE), new);
    assert_eq!(c.exit_code, 1);
    assert_eq!(c.failures[0].check, "run");
}

#[test]
fn fail_on_invariants_reports_regressions_without_failing() {
    let c = compare(
        &input("BASE", standard(&BASE_P50, &BASE_RATE)),
        &input("NEW", standard(&[300.0, 310.0, 305.0], &BASE_RATE)),
        &Judged::threshold(0.10),
        FailOn::Invariants,
    )
    .unwrap();
    assert_eq!(c.counts.regressed, 1);
    assert_eq!(c.exit_code, 0);
    assert!(
        render::render(&c, Format::Table)
            .unwrap()
            .contains("reported only")
    );
}

#[test]
fn a_metric_missing_in_new_fails_and_an_added_one_is_listed() {
    let base = standard(&BASE_P50, &BASE_RATE);
    let mut new = base.clone();
    let metrics = &mut new.scenarios[0].variants[0].metrics;
    metrics.retain(|m| m.name != "publish_rate");
    metrics.push(metric("drain_time", "ms", Direction::Lower, &[3.0]));
    let c = judge(base.clone(), new.clone());
    assert_eq!(verdict_of(&c, "publish_rate"), Verdict::Missing);
    assert_eq!(verdict_of(&c, "drain_time"), Verdict::Added);
    assert_eq!(c.result, "missing in NEW");
    assert_eq!(c.exit_code, 1);
    assert_eq!(c.missing.len(), 1);
    assert_eq!(c.missing[0].check, "metric publish_rate");
    let table = render::render(&c, Format::Table).unwrap();
    assert!(table.contains("MISSING in NEW"), "{table}");
    // Left out of judgement by --only, its absence is listed, not fatal.
    let judged = Judged {
        threshold: 0.10,
        only: vec!["*.p50".into()],
    };
    let c = compare(
        &input("BASE", base),
        &input("NEW", new),
        &judged,
        FailOn::Regressions,
    )
    .unwrap();
    assert_eq!(verdict_of(&c, "publish_rate"), Verdict::Missing);
    assert_eq!(c.exit_code, 0);
}

#[test]
fn only_a_figure_that_would_be_judged_can_be_missing() {
    // A count BASE reported and NEW did not (nothing happened to count),
    // and a figure under --fail-on invariants: listed, never fatal.
    let mut base = standard(&BASE_P50, &BASE_RATE);
    base.scenarios[0].variants[0]
        .metrics
        .push(crate::record::metrics::count("reconnected_after_kill", 1));
    let new = standard(&BASE_P50, &BASE_RATE);
    let c = judge(base.clone(), new.clone());
    assert_eq!(c.exit_code, 0, "{:?}", c.missing);
    assert!(
        c.notes.iter().any(|n| n.contains("reconnected_after_kill")),
        "{:?}",
        c.notes
    );
    let mut no_rate = new.clone();
    no_rate.scenarios[0].variants[0]
        .metrics
        .retain(|m| m.name != "publish_rate");
    let c = compare(
        &input("BASE", base.clone()),
        &input("NEW", no_rate),
        &Judged::threshold(0.10),
        FailOn::Invariants,
    )
    .unwrap();
    assert_eq!(c.exit_code, 0, "{:?}", c.missing);
    // A rate search's probe is how an answer was found, not a figure.
    let mut probing = base.clone();
    probing.scenarios[0].variants[0]
        .params
        .insert(crate::scenario::search::PROBE_PARAM.into(), "passed".into());
    let mut gone = probing.clone();
    gone.scenarios[0].variants[0]
        .metrics
        .retain(|m| m.name != "publish_rate");
    assert_eq!(judge(probing, gone).exit_code, 0);
}

#[test]
fn a_histogram_that_new_left_empty_fails() {
    let with_histogram = |count: u64| {
        let mut s = standard(&BASE_P50, &BASE_RATE);
        s.scenarios[0].variants[0]
            .histograms
            .push(crate::results::summary::HistogramReport {
                name: "e2e_latency".into(),
                count,
                hgrm_file: "histograms/x.hgrm".into(),
                hdr_file: "histograms/x.hdr".into(),
                hlog_file: None,
            });
        s
    };
    let c = judge(with_histogram(5000), with_histogram(0));
    assert_eq!(c.exit_code, 1);
    assert_eq!(c.missing[0].check, "histogram e2e_latency");
    assert!(c.missing[0].detail.contains("5000"), "{:?}", c.missing);
    let mut gone = with_histogram(0);
    gone.scenarios[0].variants[0].histograms.clear();
    assert_eq!(judge(with_histogram(5000), gone).exit_code, 1);
    assert_eq!(
        judge(with_histogram(5000), with_histogram(4000)).exit_code,
        0
    );
    // Empty in BASE too: nothing was lost.
    assert_eq!(judge(with_histogram(0), with_histogram(0)).exit_code, 0);
}

#[test]
fn every_verdict_says_the_runs_were_not_paired() {
    let c = judge(
        standard(&BASE_P50, &BASE_RATE),
        standard(&BASE_P50, &BASE_RATE),
    );
    assert!(c.unpaired.starts_with("unpaired"), "{}", c.unpaired);
    for format in [Format::Table, Format::Markdown] {
        let text = render::render(&c, format).unwrap();
        assert!(text.contains("jsbench ab"), "{text}");
    }
}

#[test]
fn different_profiles_are_refused_naming_both() {
    let base = standard(&BASE_P50, &BASE_RATE);
    let mut new = base.clone();
    new.run.profile.name = "quick".into();
    let e = refusal(base.clone(), new);
    assert!(e.contains("\"ci\"") && e.contains("\"quick\""), "{e}");

    let mut new = base.clone();
    new.run.profile.text = "name = \"ci\"\nrepeat = 5\n".into();
    let e = refusal(base, new);
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("repeat = 3") && e.contains("repeat = 5"), "{e}");
}

#[test]
fn different_schema_versions_and_set_ups_are_refused() {
    let base = standard(&BASE_P50, &BASE_RATE);
    let mut old = base.clone();
    old.schema_version = 0;
    let e = refusal(old, base.clone());
    assert!(e.contains("schema versions differ (BASE 0, NEW 1)"), "{e}");

    let mut memory = base.clone();
    memory.run.server.storage = "memory".into();
    let e = refusal(base.clone(), memory);
    assert!(e.contains("storage differs (BASE file, NEW memory)"), "{e}");

    let mut interrupted = base.clone();
    interrupted.verdict = "interrupted".into();
    let e = refusal(base.clone(), interrupted);
    assert!(e.contains("NEW") && e.contains("incomplete"), "{e}");

    let mut upgraded = base.clone();
    upgraded.run.server.version = "2.16.0".into();
    let c = judge(base, upgraded);
    assert!(
        c.notes.iter().any(|n| n.contains("2.16.0")),
        "{:?}",
        c.notes
    );
}

#[test]
fn inputs_that_are_not_summaries_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = load("BASE", &dir.path().join("nope")).unwrap_err();
    assert!(e.downcast_ref::<UsageError>().is_some());
    assert!(format!("{e}").starts_with("BASE: no results folder"), "{e}");

    let e = load("NEW", dir.path()).unwrap_err();
    assert!(format!("{e}").contains("holds no summary.json"), "{e}");

    let file = dir.path().join("summary.json");
    std::fs::write(&file, "{\"schema_version\": 99}").unwrap();
    let e = load("NEW", &file).unwrap_err();
    assert!(format!("{e}").contains("schema version 99"), "{e}");

    std::fs::write(&file, "{\"hello\": 1}").unwrap();
    let e = load("NEW", &file).unwrap_err();
    assert!(format!("{e}").contains("not a jsbench summary"), "{e}");

    let good = standard(&BASE_P50, &BASE_RATE);
    std::fs::write(&file, serde_json::to_vec(&good).unwrap()).unwrap();
    assert_eq!(load("NEW", dir.path()).unwrap().summary, good);
}

#[test]
fn formats_carry_the_verdicts() {
    let c = judge(
        standard(&BASE_P50, &BASE_RATE),
        standard(&[250.0, 260.0, 255.0], &BASE_RATE),
    );
    let table = render::render(&c, Format::Table).unwrap();
    assert!(table.contains("REGRESSED"), "{table}");
    assert!(table.contains("+24.4%"), "{table}");
    assert!(table.contains("result: REGRESSION"), "{table}");

    let md = render::render(&c, Format::Markdown).unwrap();
    assert!(md.starts_with("### jsbench compare: REGRESSION"), "{md}");
    assert!(
        md.contains("| latency / rate-1000 | `e2e_latency.p50` |"),
        "{md}"
    );
    assert!(md.contains("**regressed**"), "{md}");
    assert!(md.contains("<details>"), "{md}");

    let json: serde_json::Value =
        serde_json::from_str(&render::render(&c, Format::Json).unwrap()).unwrap();
    assert_eq!(json["exit_code"], 1);
    assert_eq!(json["result"], "regression");
    assert_eq!(json["counts"]["regressed"], 1);
    let p50 = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "e2e_latency.p50")
        .unwrap();
    assert_eq!(p50["verdict"], "regressed");
    assert_eq!(p50["base"]["max"], 210.0);
    assert_eq!(p50["new"]["repetitions"], 3);
}

#[test]
fn thresholds_parse_as_percentages() {
    assert_eq!(parse_threshold("10%"), Ok(0.10));
    assert_eq!(parse_threshold("2.5%"), Ok(0.025));
    assert_eq!(parse_threshold("25"), Ok(0.25));
    assert_eq!(parse_threshold("0%"), Ok(0.0));
    assert!(parse_threshold("ten").unwrap_err().0.contains("like 10%"));
    assert!(
        parse_threshold("-5%")
            .unwrap_err()
            .0
            .contains("out of range")
    );
    assert!(
        parse_threshold("5000%")
            .unwrap_err()
            .0
            .contains("out of range")
    );
}

#[test]
fn only_judges_the_chosen_metrics_and_shows_the_rest() {
    let judged = Judged {
        threshold: 0.10,
        only: vec!["*_rate".into(), "latency/rate-1000/e2e_*.p99".into()],
    };
    let c = compare(
        &input("BASE", standard(&BASE_P50, &BASE_RATE)),
        &input("NEW", standard(&[300.0, 310.0, 305.0], &BASE_RATE)),
        &judged,
        FailOn::Regressions,
    )
    .unwrap();
    assert_eq!(verdict_of(&c, "e2e_latency.p50"), Verdict::Ignored);
    assert_eq!(verdict_of(&c, "publish_rate"), Verdict::Unchanged);
    assert_eq!(verdict_of(&c, "target_rate"), Verdict::Context);
    assert_eq!(c.exit_code, 0);
    assert_eq!(c.counts.not_judged, 1);
    let table = render::render(&c, Format::Table).unwrap();
    assert!(
        table.contains("not judged") && table.contains("judged: *_rate"),
        "{table}"
    );
}

#[test]
fn globs_match_runs_of_characters() {
    for (p, t) in [
        ("*", "anything"),
        ("*.p50", "e2e_latency.p50"),
        ("*latency*.p50", "pub_ack_latency_actual.p50"),
        ("e2e_latency.*", "e2e_latency.max"),
        ("a*b*c", "abc"),
        ("exact", "exact"),
    ] {
        assert!(glob(p, t), "{p} should match {t}");
    }
    for (p, t) in [
        ("*.p50", "e2e_latency.p500x"),
        ("*latency*.p50", "send_lag.p50"),
        ("a*b*c", "acb"),
        ("ab*ba", "aba"),
        ("exact", "exactly"),
        ("*µs", "p50 ms"),
    ] {
        assert!(!glob(p, t), "{p} should not match {t}");
    }
}

#[test]
fn ranges_name_a_shared_unit_once() {
    use crate::report::page::format_range;
    assert_eq!(format_range(199.0, 230.0, "us"), "199..230 µs");
    assert_eq!(format_range(995.0, 1130.0, "us"), "995 µs..1.13 ms");
    assert_eq!(format_range(990.0, 1010.0, "msg/s"), "990..1,010 msg/s");
    assert_eq!(format_range(1.0, 2.0, ""), "1.00..2.00");
    use crate::report::page::format_with_range;
    assert_eq!(
        format_with_range(1000.2, Some((1000.1, 1000.3)), "msg/s"),
        "1,000 msg/s"
    );
    assert_eq!(
        format_with_range(201.0, Some((199.0, 230.0)), "us"),
        "201 µs (199..230 µs)"
    );
}

/// A run with figures of merit and figures that are not: the tails beyond
/// p99.9, a maximum, a drain time, a ratio.
fn with_tails(scale: f64, profile: &str) -> Summary {
    let mut s = summary(vec![
        metric("publish_rate", "msg/s", Direction::Higher, &BASE_RATE),
        metric("e2e_latency.p50", "us", Direction::Lower, &BASE_P50),
        metric(
            "publisher_cpu_per_msg",
            "us",
            Direction::Lower,
            &[5.0, 5.1, 5.2],
        ),
        metric(
            "e2e_latency.p99.99",
            "us",
            Direction::Lower,
            &[900.0 * scale, 910.0 * scale, 920.0 * scale],
        ),
        metric(
            "e2e_latency.max",
            "us",
            Direction::Lower,
            &[1e4 * scale, 1.1e4 * scale, 1.2e4 * scale],
        ),
        metric(
            "drain_time",
            "ms",
            Direction::Lower,
            &[2.0 * scale, 2.1 * scale, 2.2 * scale],
        ),
        metric(
            "overhead.e2e_p99_ratio",
            "ratio",
            Direction::Lower,
            &[1.0 * scale, 1.01 * scale, 1.02 * scale],
        ),
    ]);
    s.run.profile.text = profile.to_string();
    s
}

#[test]
fn by_default_only_the_figures_of_merit_are_judged_and_counted() {
    // Judging every metric at 10% with no correction, two runs of one build
    // "regress" somewhere in the tails every time; by default compare
    // judges the figures ab judges: rates, CPU per message, p50 to p99.9.
    let profile = "name = \"ci\"\nrepeat = 3\n";
    let c = judge(with_tails(1.0, profile), with_tails(3.0, profile));
    for shown in [
        "e2e_latency.p99.99",
        "e2e_latency.max",
        "drain_time",
        "overhead.e2e_p99_ratio",
    ] {
        assert_eq!(verdict_of(&c, shown), Verdict::Ignored, "{shown}");
    }
    assert_eq!(c.exit_code, 0);
    assert_eq!((c.counts.judged, c.counts.not_judged), (3, 4));
    assert_eq!(c.selection.from, JudgedBy::Default);
    let table = render::render(&c, Format::Table).unwrap();
    assert!(table.contains("3 judged: the figures of merit"), "{table}");
    let md = render::render(&c, Format::Markdown).unwrap();
    assert!(md.contains("3 judged"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&render::render(&c, Format::Json).unwrap()).unwrap();
    assert_eq!(json["counts"]["judged"], 3);
    assert_eq!(json["selection"]["from"], "default");
}

#[test]
fn the_profiles_ab_judge_is_the_default_set_and_only_overrides_it() {
    let profile =
        "name = \"ci\"\nrepeat = 3\n[ab]\njudge = [\"latency/*/drain_time\", \"*.max\"]\n";
    let c = judge(with_tails(1.0, profile), with_tails(3.0, profile));
    assert_eq!(verdict_of(&c, "drain_time"), Verdict::Regressed);
    assert_eq!(verdict_of(&c, "e2e_latency.max"), Verdict::Regressed);
    assert_eq!(verdict_of(&c, "e2e_latency.p50"), Verdict::Ignored);
    assert_eq!(c.counts.judged, 2);
    assert_eq!(c.exit_code, 1);
    assert_eq!(c.selection.from, JudgedBy::Profile);
    let table = render::render(&c, Format::Table).unwrap();
    assert!(
        table.contains("2 judged: latency/*/drain_time, *.max (the profile's [ab] judge)"),
        "{table}"
    );
    let only = Judged {
        threshold: 0.10,
        only: vec!["*.p50".into()],
    };
    let c = compare(
        &input("BASE", with_tails(1.0, profile)),
        &input("NEW", with_tails(3.0, profile)),
        &only,
        FailOn::Regressions,
    )
    .unwrap();
    assert_eq!(verdict_of(&c, "drain_time"), Verdict::Ignored);
    assert_eq!((c.counts.judged, c.exit_code), (1, 0));
    assert_eq!(c.selection.from, JudgedBy::Only);
}

/// Issue 51: markdown cells passed raw HTML (`<img src=...>`) into PR
/// comments and job summaries.
#[test]
fn markdown_cells_carry_no_html_and_no_control_characters() {
    let cell = super::render::md("<img src=x onerror=alert(1)> & a|b\nc\u{1b}[31m");
    assert_eq!(
        cell,
        "&lt;img src=x onerror=alert(1)&gt; &amp; a\\|b c [31m"
    );
    assert!(!cell.contains('<'));
}
