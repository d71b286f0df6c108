//! The verdicts on made-up pairs: each verdict reached, the error budget
//! spent across looks and families, and checks judged; long enough to sit
//! apart from the judging it tests.

use super::*;
use crate::variant::Invariant;

/// The rule the judge's tests and ab-simulate's share.
pub(crate) fn rule() -> Rule {
    Rule {
        throughput: 0.05,
        latency: 0.10,
        cost: 0.05,
        confidence: 0.99,
        miss: 0.10,
        only: Vec::new(),
    }
}

fn track(metric: &str, unit: &str, direction: Direction, pairs: &[(f64, f64)]) -> Track {
    let key = Key {
        profile: "ci".into(),
        scenario: "s".into(),
        variant: "v".into(),
        metric: metric.into(),
    };
    let m = Metric::new(metric, unit, 1.0, direction);
    Track {
        class: rule().class(&key, &m),
        key,
        unit: unit.into(),
        direction,
        pairs: pairs.iter().map(|&(b, n)| (Some(b), Some(n))).collect(),
        why_not: None,
    }
}

/// `n` pairs of NEW at `ratio` times BASE, with a 2% wobble.
fn pairs(n: usize, base: f64, ratio: f64) -> Vec<(f64, f64)> {
    (0..n)
        .map(|i| {
            let wobble = [1.0, 1.02, 0.98, 1.01, 0.99][i % 5];
            (base, base * ratio * wobble)
        })
        .collect()
}

fn verdict(t: &Track) -> PairedVerdict {
    let look = Look::last(t.pairs.len(), &rule());
    judge_metrics(std::slice::from_ref(t), &rule(), &look, &Tails::new())[0].verdict
}

#[test]
fn a_rate_drop_beyond_half_the_threshold_regresses_and_a_rise_improves() {
    let h = Direction::Higher;
    let down = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 0.93));
    assert_eq!(verdict(&down), PairedVerdict::Regressed);
    let up = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 1.07));
    assert_eq!(verdict(&up), PairedVerdict::Improved);
    let flat = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 1.0));
    assert_eq!(verdict(&flat), PairedVerdict::Unchanged);
    // In the indifference zone with little noise: a 4% drop is a real
    // one beyond half the threshold, and said so.
    let zone = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 0.96));
    assert_eq!(verdict(&zone), PairedVerdict::Regressed);
    // The same drop in noise: no claim either way yet.
    let noisy: Vec<(f64, f64)> = (0..20)
        .map(|i| (1e5, 1e5 * 0.96 * [1.08, 0.92, 1.05, 0.95, 1.0][i % 5]))
        .collect();
    let noisy = track("publish_rate", "msg/s", h, &noisy);
    assert_eq!(verdict(&noisy), PairedVerdict::Undecided);
}

#[test]
fn latencies_and_costs_regress_upwards() {
    let l = Direction::Lower;
    let p99 = track("e2e_latency.p99", "us", l, &pairs(20, 800.0, 1.15));
    assert_eq!(verdict(&p99), PairedVerdict::Regressed);
    let cpu = track("client_cpu_per_msg", "us", l, &pairs(20, 30.0, 1.06));
    assert_eq!(cpu.class, Some(Class::Cost));
    assert_eq!(verdict(&cpu), PairedVerdict::Regressed);
}

#[test]
fn too_few_pairs_decide_nothing() {
    let t = track(
        "publish_rate",
        "msg/s",
        Direction::Higher,
        &pairs(5, 1e5, 0.5),
    );
    assert_eq!(verdict(&t), PairedVerdict::TooFewPairs);
    assert!(!PairedVerdict::TooFewPairs.decided());
}

/// `t` first, then 39 flat latencies over 12 pairs: a family of 40.
fn among_39_flat(t: Track) -> Vec<Track> {
    let mut many = vec![t];
    for i in 0..39 {
        let mut other = track(
            "e2e_latency.p50",
            "us",
            Direction::Lower,
            &pairs(12, 500.0, 1.0),
        );
        other.key.variant = format!("v{i}");
        many.push(other);
    }
    many
}

#[test]
fn many_metrics_share_the_false_alarm_rate() {
    // A 4% drop at 12 pairs is a regression beyond 2.5% when judged
    // alone; among 40 metrics the same evidence is not enough.
    let t = track(
        "publish_rate",
        "msg/s",
        Direction::Higher,
        &pairs(12, 1e5, 0.955),
    );
    let look = Look::last(12, &rule());
    assert_eq!(
        judge_metrics(std::slice::from_ref(&t), &rule(), &look, &Tails::new())[0].verdict,
        PairedVerdict::Regressed
    );
    let many = among_39_flat(t.clone());
    assert_ne!(
        judge_metrics(&many, &rule(), &look, &Tails::new())[0].verdict,
        PairedVerdict::Regressed
    );
}

#[test]
fn looks_spend_the_rate_and_never_more_than_it() {
    let r = rule();
    let looks: Vec<Look> = (1..=1024).filter_map(|n| Look::interim(n, &r)).collect();
    assert_eq!(
        looks.iter().map(|l| l.pairs).collect::<Vec<_>>(),
        vec![8, 16, 32, 64, 128, 256, 512, 1024]
    );
    let spent: f64 = looks.iter().map(|l| l.alpha).sum::<f64>() + Look::last(2000, &r).alpha;
    assert!(spent <= r.alpha() + 1e-15, "{spent}");
    assert!(Look::last(10, &r).alpha >= 0.75 * r.alpha() - 1e-15);
    assert_eq!(Look::interim(12, &r), None);
}

#[test]
fn only_a_systematic_absence_fails() {
    let h = Direction::Higher;
    let mut gone = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 1.0));
    for p in &mut gone.pairs {
        p.1 = None;
    }
    let look = Look::last(20, &rule());
    let j = &judge_metrics(std::slice::from_ref(&gone), &rule(), &look, &Tails::new())[0];
    assert_eq!(j.verdict, PairedVerdict::MissingInNew);
    assert!(j.verdict.fails());
    let mut flaky = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 1.0));
    flaky.pairs[3].1 = None;
    flaky.pairs[11].1 = None;
    let j = &judge_metrics(std::slice::from_ref(&flaky), &rule(), &look, &Tails::new())[0];
    assert_eq!(j.verdict, PairedVerdict::Unchanged, "{j:?}");
    // Shown metrics are never missing.
    let mut shown = track(
        "target_rate",
        "msg/s",
        Direction::None,
        &pairs(20, 1e5, 1.0),
    );
    for p in &mut shown.pairs {
        p.1 = None;
    }
    let j = &judge_metrics(std::slice::from_ref(&shown), &rule(), &look, &Tails::new())[0];
    assert_eq!(j.verdict, PairedVerdict::NotJudged);
}

#[test]
fn the_latency_floor_takes_both_sides() {
    let l = Direction::Lower;
    let tiny = track("send_lag.p50", "us", l, &pairs(20, 0.1, 3.0));
    assert_eq!(verdict(&tiny), PairedVerdict::NotJudged);
    // BASE under the floor, NEW far above it: judged, and regressed.
    let grown = track("send_lag.p50", "us", l, &pairs(20, 5.0, 10.0));
    assert_eq!(verdict(&grown), PairedVerdict::Regressed);
}

#[test]
fn the_pass_is_held_to_the_miss_rate_not_the_false_alarm_rate() {
    // Identical builds, spread ±8% per pair: "worse by 5%" is ruled out
    // at the miss rate, but not at a rate as strict as a false alarm's.
    let aa: Vec<(f64, f64)> = (0..16)
        .map(|i| {
            (
                1e5,
                1e5 * [1.08, 0.92, 1.05, 0.95, 1.02, 0.98, 1.0, 0.97][i % 8],
            )
        })
        .collect();
    let t = track("publish_rate", "msg/s", Direction::Higher, &aa);
    let judged = |miss: f64| {
        let rule = Rule { miss, ..rule() };
        let look = Look::last(16, &rule);
        judge_metrics(std::slice::from_ref(&t), &rule, &look, &Tails::new()).remove(0)
    };
    let passed = judged(0.10);
    assert_eq!(passed.verdict, PairedVerdict::Unchanged, "{passed:?}");
    // The interval shown is the pass's: its worse end within 5%.
    assert!(passed.low.unwrap() > 1.0 / 1.05, "{passed:?}");
    let strict = judged(0.005);
    assert_eq!(strict.verdict, PairedVerdict::Undecided, "{strict:?}");
    // A look spends a share of the miss rate; all looks at most all of it.
    let total: f64 = (1..=12).map(|k| spend(0.10, Some(k))).sum::<f64>() + spend(0.10, None);
    assert!(total <= 0.10 + 1e-12, "{total}");
}

#[test]
fn undecided_metrics_say_what_would_decide_them() {
    let noisy: Vec<(f64, f64)> = (0..16)
        .map(|i| (1e5, 1e5 * [1.3, 0.7, 1.2, 0.8, 1.1, 0.9, 1.0, 0.94][i % 8]))
        .collect();
    let t = track("publish_rate", "msg/s", Direction::Higher, &noisy);
    let j = &judge_metrics(
        std::slice::from_ref(&t),
        &rule(),
        &Look::last(16, &rule()),
        &Tails::new(),
    )[0];
    assert_eq!(j.verdict, PairedVerdict::Undecided);
    assert!(j.pairs_to_decide.unwrap() > 16, "{j:?}");
    assert!(j.detectable.unwrap() > 0.05, "{j:?}");
}

#[test]
fn a_tail_is_judged_from_its_merged_histograms_when_the_pairs_carry_them() {
    // Per pair the p99 looks unchanged; the merged histograms say it
    // rose by half, with a spread that leaves no doubt.
    let t = track(
        "e2e_latency.p99",
        "us",
        Direction::Lower,
        &pairs(20, 800.0, 1.0),
    );
    let tail = |log_ratio: f64| TailEstimate {
        log_ratio,
        sd: 0.05,
        samples: (150_000, 150_000),
        beyond: (1_500, 1_500),
        window_samples: 7_500,
        pairs: 20,
    };
    let look = Look::last(20, &rule());
    let judged = |log_ratio: f64| {
        let tails = Tails::from([(t.key.clone(), (0.99, tail(log_ratio)))]);
        judge_metrics(std::slice::from_ref(&t), &rule(), &look, &tails).remove(0)
    };
    let risen = judged(1.5f64.ln());
    assert_eq!(risen.verdict, PairedVerdict::Regressed, "{risen:?}");
    let report = risen.tail.expect("the samples behind it are stated");
    assert_eq!(report.beyond, (1_500, 1_500));
    assert!(!report.windows_too_short);
    // No change, and sd 0.05 leaves "worse by 10%" at p = 0.03: ruled
    // out at the final look's miss rate (7.5%), though a regression
    // at the false-alarm rate's 0.4% could not have been.
    assert_eq!(judged(0.0).verdict, PairedVerdict::Unchanged);
    let looser = Tails::from([(
        t.key.clone(),
        (
            0.99,
            TailEstimate {
                sd: 0.10,
                ..tail(0.0)
            },
        ),
    )]);
    // sd 0.10: "worse by 10%" at p = 0.17, not ruled out.
    let j = judge_metrics(std::slice::from_ref(&t), &rule(), &look, &looser).remove(0);
    assert_eq!(j.verdict, PairedVerdict::Undecided);
    // A wide spread: no claim yet, and how many pairs would make one.
    let wide = Tails::from([(
        t.key.clone(),
        (
            0.999,
            TailEstimate {
                sd: 0.4,
                window_samples: 500,
                ..tail(0.02)
            },
        ),
    )]);
    let j = judge_metrics(std::slice::from_ref(&t), &rule(), &look, &wide).remove(0);
    assert_eq!(j.verdict, PairedVerdict::Undecided);
    assert!(j.pairs_to_decide.unwrap() > 20);
    assert!(
        j.tail.unwrap().windows_too_short,
        "500 samples cannot resolve a p99.9"
    );
}

/// One variant: scenario, variant, metrics, broken checks, params.
type Variant<'a> = (&'a str, &'a str, Vec<Metric>, &'a [&'a str], &'a [&'a str]);

/// A run of profile "ci" with these variants.
fn summary(variants: &[Variant<'_>]) -> Summary {
    let mut scenarios: Vec<serde_json::Value> = Vec::new();
    for (scenario, variant, metrics, broken, params) in variants {
        let invariants: Vec<Invariant> = broken
            .iter()
            .map(|b| Invariant::check(b, false, "broken".to_string()))
            .collect();
        let params: serde_json::Map<String, serde_json::Value> = params
            .iter()
            .map(|p| (p.to_string(), serde_json::json!("x")))
            .collect();
        scenarios.push(serde_json::json!({
            "name": scenario, "kind": "latency",
            "variants": [{
                "name": variant, "passed": broken.is_empty(), "params": params,
                "metrics": metrics, "histograms": [],
                "ledger": crate::record::ledger::LedgerCounts::default(),
                "invariants": invariants, "warnings": [], "timelines": {},
                "error": null, "elapsed_s": 1.0,
            }],
        }));
    }
    let json = serde_json::json!({
        "schema_version": crate::results::summary::SCHEMA_VERSION,
        "run": {
            "id": "r", "started_at": "t", "finished_at": "t",
            "tool": {"name": "jsbench", "version": "0", "git_commit": null, "git_dirty": false},
            "server": {"mode": "embedded", "version": "2.15.1", "urls": "u", "server_name": "s",
                       "cluster": null, "jetstream_domain": null, "storage": "file", "replicas": 1},
            "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": null,
                     "cpu_model": "cpu", "hostname": "h"},
            "profile": {"name": "ci", "source": "ci", "description": "", "text": ""},
            "repeat": 1,
        },
        "scenarios": scenarios,
        "verdict": "passed",
    });
    serde_json::from_value(json).unwrap()
}

fn rate(v: f64) -> Metric {
    Metric::new("publish_rate", "msg/s", v, Direction::Higher)
}

#[test]
fn tracks_read_counts_as_zero_skip_probes_and_refuse_changed_units() {
    let count = |v: u64| crate::record::metrics::count("redelivered", v);
    let base = summary(&[
        ("s", "v", vec![rate(1e5), count(3)], &[], &[]),
        ("search", "rate-1000", vec![rate(1e3)], &[], &[PROBE_PARAM]),
        (
            "lat",
            "v",
            vec![Metric::new(
                "e2e_latency.p50",
                "us",
                100.0,
                Direction::Lower,
            )],
            &[],
            &[],
        ),
    ]);
    let new = summary(&[
        ("s", "v", vec![rate(1e5)], &[], &[]),
        ("search", "rate-1000", vec![rate(1e3)], &[], &[PROBE_PARAM]),
        (
            "lat",
            "v",
            vec![Metric::new("e2e_latency.p50", "ms", 0.1, Direction::Lower)],
            &[],
            &[],
        ),
    ]);
    let pairs = [(std::slice::from_ref(&base), std::slice::from_ref(&new))];
    let t = tracks(&pairs, &rule());
    let get = |s: &str, m: &str| {
        t.iter()
            .find(|t| t.key.scenario == s && t.key.metric == m)
            .unwrap()
    };
    assert_eq!(get("s", "redelivered").pairs, vec![(Some(3.0), Some(0.0))]);
    let probe = get("search", "publish_rate");
    assert_eq!(probe.class, None);
    assert!(probe.why_not.as_deref().unwrap().contains("probe"));
    let lat = get("lat", "e2e_latency.p50");
    assert_eq!(lat.class, None);
    assert!(
        lat.why_not.as_deref().unwrap().contains("BASE us, NEW ms"),
        "{lat:?}"
    );
}

#[test]
fn checks_are_judged_in_pairs() {
    let ok = summary(&[("s", "v", vec![rate(1e5)], &[], &[])]);
    let lost = summary(&[("s", "v", vec![rate(1e5)], &["lost = 0"], &[])]);
    let flaky = summary(&[("s", "v", vec![rate(1e5)], &["stream holds"], &[])]);
    let look = Look::last(20, &rule());
    let judge = |pairs: Vec<(&Summary, &Summary)>| {
        let pairs: Vec<(&[Summary], &[Summary])> = pairs
            .into_iter()
            .map(|(b, n)| (std::slice::from_ref(b), std::slice::from_ref(n)))
            .collect();
        judge_checks(&pairs, &look)
    };
    // NEW loses messages in every pair, BASE never: it fails.
    let c = judge((0..20).map(|_| (&ok, &lost)).collect());
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].verdict, CheckVerdict::FailsInNew);
    assert_eq!((c[0].new_only, c[0].base_only), (20, 0));
    // Once in twenty: suspect, not a failure.
    let once: Vec<_> = (0..20)
        .map(|i| (&ok, if i == 5 { &lost } else { &ok }))
        .collect();
    assert_eq!(judge(once)[0].verdict, CheckVerdict::Suspect);
    // Flaky on both sides: the environment's.
    let both: Vec<_> = (0..20)
        .map(|i| match i % 7 {
            0 => (&flaky, &ok),
            3 => (&ok, &flaky),
            _ => (&ok, &ok),
        })
        .collect();
    assert_eq!(judge(both)[0].verdict, CheckVerdict::Environment);
    // NEW alone in 9 pairs, BASE alone in 1: not the environment's, open
    // (below 10 NEW-only pairs the sign test cannot reject at this level).
    let ahead: Vec<_> = (0..20)
        .map(|i| match i {
            0..=8 => (&ok, &flaky),
            9 => (&flaky, &ok),
            _ => (&ok, &ok),
        })
        .collect();
    let c = judge(ahead);
    assert_eq!(c[0].verdict, CheckVerdict::Suspect, "{c:?}");
    assert!(c[0].verdict.open());
    assert!(pairs_to_fail(9, 1, look.checks_alpha()) >= 1);
    // BASE's failures are kept and said.
    let base: Vec<_> = (0..20).map(|_| (&lost, &ok)).collect();
    assert_eq!(judge(base)[0].verdict, CheckVerdict::BaseOnly);
}

/// A side at zero used to drop its pair (the ratio is not finite), so a
/// cost that rose from nothing lost its strongest pairs and read as "too
/// few pairs"; judged as far off instead, it regresses, and nothing on
/// both sides is no change.
#[test]
fn a_metric_that_rises_from_zero_is_judged_not_dropped() {
    let l = Direction::Lower;
    let rose: Vec<(f64, f64)> = (0..20).map(|i| (0.0, 5.0 + i as f64 % 3.0)).collect();
    let rose = track("client_cpu_per_msg", "us", l, &rose);
    assert_eq!(rose.class, Some(Class::Cost));
    assert_eq!(verdict(&rose), PairedVerdict::Regressed);
    let fell: Vec<(f64, f64)> = (0..20).map(|i| (5.0 + i as f64 % 3.0, 0.0)).collect();
    let fell = track("client_cpu_per_msg", "us", l, &fell);
    assert_eq!(verdict(&fell), PairedVerdict::Improved);
    let mut both = pairs(20, 30.0, 1.0);
    for p in both.iter_mut().step_by(2) {
        *p = (0.0, 0.0);
    }
    let both = track("client_cpu_per_msg", "us", l, &both);
    assert_eq!(verdict(&both), PairedVerdict::Unchanged);
    let look = Look::last(20, &rule());
    let judged = judge_metrics(std::slice::from_ref(&both), &rule(), &look, &Tails::new());
    assert_eq!(judged[0].ratios.len(), 20, "no pair dropped");
}

/// The interval a verdict was decided on agrees with the verdict: an
/// undecided metric's interval at its tested level is never wholly beyond
/// τ/2, even where the pass's interval is (a 4.5% drop among 40 metrics:
/// `jsbench ab ci` printed such a row as "undecided" beside an interval
/// wholly beyond 2.5%, and a reader could not tell why).
#[test]
fn the_interval_shown_is_the_one_the_verdict_was_decided_on() {
    let h = Direction::Higher;
    let drop = track("publish_rate", "msg/s", h, &pairs(12, 1e5, 0.955));
    let many = among_39_flat(drop);
    let alone = track("publish_rate", "msg/s", h, &pairs(20, 1e5, 0.93));
    let look = Look::last(12, &rule());
    let judged = judge_metrics(&many, &rule(), &look, &Tails::new());
    let j = &judged[0];
    assert_eq!(j.verdict, PairedVerdict::Undecided, "{j:?}");
    let half_worse = 1.0 / (1.0 + 0.05 / 2.0);
    assert!(
        j.high.unwrap() < half_worse,
        "the pass's interval is beyond τ/2: {j:?}"
    );
    assert!(
        j.decided_high.is_none_or(|h| h >= half_worse),
        "the decided one is not: {j:?}"
    );
    assert!(j.decided_coverage.unwrap() > j.coverage.unwrap());
    for u in &judged[1..] {
        assert_eq!(u.verdict, PairedVerdict::Unchanged);
        assert_eq!((u.decided_low, u.decided_high), (u.low, u.high));
    }
    let look = Look::last(20, &rule());
    let r = &judge_metrics(std::slice::from_ref(&alone), &rule(), &look, &Tails::new())[0];
    assert_eq!(r.verdict, PairedVerdict::Regressed);
    assert!(r.decided_high.unwrap() < half_worse, "{r:?}");
}

#[test]
fn holm_levels_say_what_each_test_was_held_to() {
    let p = [0.001, 0.04, 0.01, 0.5];
    let levels = stats::holm_levels(&p, 0.05);
    // Ranks: 0.001 at 0.05/4, 0.01 at 0.05/3, 0.04 stops at 0.05/2, and
    // 0.5 after the stop is held to the same 0.025.
    assert_eq!(levels, vec![0.0125, 0.025, 0.05 / 3.0, 0.025]);
    assert_eq!(stats::holm(&p, 0.05), vec![true, false, true, false]);
}
