//! Charts and page from a small fixture: a latency scenario with a rate
//! sweep of three variants, made up in memory and, where a test needs
//! files, written out as a results folder.

use std::path::Path;

use super::charts::{self, Scale, Stroke, draw, latency};
use super::data::ResultsData;
use super::page;
use crate::record::histogram::Recorder;
use crate::record::ledger::LedgerCounts;
use crate::record::metrics::{Direction, Metric, latency_metrics};
use crate::record::timeline::Timeline;
use crate::results::summary::{HistogramReport, SCHEMA_VERSION, Summary};
use crate::variant::Invariant;

/// A latency histogram: `n` values from `base_us` with a tail.
fn recorder(base_us: u64, n: u64) -> Recorder {
    let mut r = Recorder::new();
    for i in 0..n {
        // Quadratic spread: most values near the base, a few far out.
        let us = base_us + (i * i) / (n * 2).max(1);
        r.record(us * 1_000);
    }
    r
}

/// One variant of the sweep, as summary.json would hold it. Built as JSON
/// so fields added to the schema later (with their serde defaults) do not
/// break the fixture.
fn variant(rate: u64, histograms: &mut Vec<(String, String, Recorder)>) -> serde_json::Value {
    let name = format!("rate-{rate}");
    let mut metrics = vec![
        Metric::new("target_rate", "msg/s", rate as f64, Direction::None),
        Metric::new(
            "publish_rate",
            "msg/s",
            rate as f64 * 0.999,
            Direction::Higher,
        ),
    ];
    let mut reports = Vec::new();
    for (h, base) in [
        ("e2e_latency", 200 + rate / 100),
        ("e2e_latency_actual", 180 + rate / 100),
        ("pub_ack_latency", 150 + rate / 100),
        ("pub_ack_latency_actual", 140 + rate / 100),
        ("send_lag", 1),
    ] {
        let r = recorder(base, 2_000);
        metrics.extend(latency_metrics(h, &r.summary()));
        reports.push(HistogramReport {
            name: h.into(),
            count: r.count(),
            hgrm_file: format!("histograms/latency.{name}.{h}.hgrm"),
            hdr_file: format!("histograms/latency.{name}.{h}.hdr"),
            hlog_file: None,
        });
        histograms.push((name.clone(), h.into(), r));
    }
    let timeline = |share: f64| Timeline {
        origin_ns: 0,
        bucket_ns: 1_000_000_000,
        counts: vec![(rate as f64 * share) as u64; 6],
    };
    let n = rate * 6;
    serde_json::json!({
        "name": name,
        "passed": true,
        "params": { "rate": rate, "warmup": "1s" },
        "metrics": metrics,
        "histograms": reports,
        "ledger": LedgerCounts {
            published: n,
            persisted: n,
            delivered: n,
            deliveries: n,
            acked: n,
            ..Default::default()
        },
        "invariants": [
            Invariant::check("lost = 0", true, format!("0 of {n} persisted messages undelivered")),
            Invariant::equal("no duplicates flagged", 0, 0),
        ],
        "warnings": [],
        "timelines": { "published": timeline(1.0), "delivered": timeline(0.98) },
        "error": null,
        "elapsed_s": 7.0,
    })
}

pub(crate) fn fixture() -> (Summary, Vec<(String, String, Recorder)>) {
    let mut histograms = Vec::new();
    let variants: Vec<serde_json::Value> = [1_000, 5_000, 20_000]
        .iter()
        .map(|&r| variant(r, &mut histograms))
        .collect();
    let summary = serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "run": {
            "id": "20261130T101839Z-3f2a1bc-fixture",
            "started_at": "2026-11-30T10:18:39Z",
            "finished_at": "2026-11-30T10:19:10Z",
            "tool": {
                "name": "jsbench",
                "version": "0.1.0",
                "git_commit": "3f2a1bc9d",
                "git_dirty": false,
            },
            "server": {
                "mode": "embedded",
                "version": "2.15.1",
                "urls": "nats://127.0.0.1:4222",
                "server_name": "NXYZ",
                "cluster": null,
                "jetstream_domain": null,
                "storage": "file",
                "replicas": 1,
            },
            "host": {
                "os": "linux",
                "arch": "x86_64",
                "cores": 2,
                "memory_bytes": 24u64 << 30,
                "cpu_model": null,
                "hostname": null,
            },
            "profile": {
                "name": "fixture",
                "source": "fixture.toml",
                "description": "A made-up sweep",
                "text": "name = \"fixture\"\n",
            },
        },
        "scenarios": [{ "name": "latency", "kind": "latency", "variants": variants }],
        "verdict": "passed",
    });
    let summary: Summary = serde_json::from_value(summary).expect("the fixture is a summary");
    (summary, histograms)
}

fn data(summary: Summary, histograms: Vec<(String, String, Recorder)>) -> ResultsData {
    ResultsData::from_parts(
        "/nonexistent".into(),
        summary,
        histograms
            .into_iter()
            .map(|(v, h, r)| (("latency".to_string(), v, h), r)),
    )
}

/// Writes the fixture as a results folder (summary.json and histograms).
pub(crate) fn write_fixture(dir: &Path) -> Summary {
    let (summary, histograms) = fixture();
    std::fs::create_dir_all(dir.join("histograms")).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_vec_pretty(&summary).unwrap(),
    )
    .unwrap();
    for (v, h, r) in histograms {
        let stem = format!("histograms/latency.{v}.{h}");
        std::fs::write(dir.join(format!("{stem}.hdr")), r.to_base64()).unwrap();
        std::fs::write(dir.join(format!("{stem}.hgrm")), r.to_hgrm()).unwrap();
    }
    summary
}

#[test]
fn percentile_curve_runs_from_the_median_to_four_nines_in_microseconds() {
    let mut r = Recorder::new();
    for us in 1..=10_000u64 {
        r.record(us * 1_000);
    }
    let curve = latency::percentile_curve(&r);
    let (q0, v0) = curve[0];
    let (qn, vn) = *curve.last().unwrap();
    assert!((q0 - 0.5).abs() < 1e-9 && (qn - 0.9999).abs() < 1e-9);
    assert!((v0 - 5_000.0).abs() / 5_000.0 < 0.002, "median {v0}");
    assert!((vn - 9_999.0).abs() / 9_999.0 < 0.002, "p99.99 {vn}");
    assert!(
        curve
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
    );
}

#[test]
fn timelines_become_per_second_rates_as_steps() {
    let t = Timeline {
        origin_ns: 0,
        bucket_ns: 500_000_000,
        counts: vec![100, 250],
    };
    assert_eq!(
        latency::rate_points(&t),
        [(0.0, 200.0), (0.5, 200.0), (0.5, 500.0), (1.0, 500.0)]
    );
}

#[test]
fn sweep_points_are_sorted_by_rate_and_skip_failed_variants() {
    let (mut summary, _) = fixture();
    let variants = &mut summary.scenarios[0].variants;
    variants.reverse();
    variants[0].error = Some("boom".into());
    let points = latency::sweep_points(variants, "publish_rate", "e2e_latency.p50");
    assert_eq!(points.len(), 2);
    assert!(points[0].0 < points[1].0);
}

#[test]
fn latency_scenario_gets_every_latency_chart_with_intended_and_actual_apart() {
    let (summary, histograms) = fixture();
    let data = data(summary, histograms);
    let scenario = data.scenarios().next().unwrap();
    let charts = charts::charts_for(&scenario);
    let stems: Vec<&str> = charts.iter().map(|c| c.stem.as_str()).collect();
    assert_eq!(
        stems,
        [
            "latency.e2e_latency",
            "latency.pub_ack_latency",
            "latency.send_lag",
            "latency.throughput",
            "latency.latency_vs_throughput",
        ]
    );
    let e2e = &charts[0];
    assert_eq!(e2e.x.scale, Scale::Nines);
    assert_eq!(e2e.y.scale, Scale::Log);
    assert_eq!(e2e.series.len(), 6, "three variants, intended and actual");
    let first = &e2e.series[0];
    let second = &e2e.series[1];
    assert_eq!(first.label, "rate-1000 intended send");
    assert_eq!(second.label, "rate-1000 actual send");
    assert_eq!(
        (first.stroke, second.stroke),
        (Stroke::Solid, Stroke::Dashed)
    );
    assert_eq!(first.colour, second.colour, "a variant keeps its colour");
    assert_ne!(first.colour, e2e.series[2].colour);

    let throughput = &charts[3];
    assert!(
        throughput
            .series
            .iter()
            .any(|s| s.stroke == Stroke::Reference && s.points[0].0 == 1.0),
        "warm-up marked at 1 s"
    );
    // 1k..20k spans more than a decade: a log rate axis.
    assert_eq!(charts[4].x.scale, Scale::Log);
    assert!(charts[4].series.iter().all(|s| s.points.len() == 3));
}

#[test]
fn a_single_variant_has_no_sweep_and_a_scenario_without_data_no_charts() {
    let (mut summary, histograms) = fixture();
    summary.scenarios[0].variants.truncate(1);
    let d = data(summary.clone(), histograms);
    let stems: Vec<String> = charts::charts_for(&d.scenarios().next().unwrap())
        .into_iter()
        .map(|c| c.stem)
        .collect();
    assert!(!stems.iter().any(|s| s.contains("latency_vs_throughput")));

    // A kind jsbench cannot draw yet: no histograms, no timelines, no metrics.
    let v = &mut summary.scenarios[0].variants[0];
    v.metrics.clear();
    v.timelines.clear();
    summary.scenarios[0].kind = "redelivery".into();
    let d = data(summary, Vec::new());
    assert!(charts::charts_for(&d.scenarios().next().unwrap()).is_empty());
}

#[test]
fn charts_draw_as_svg_and_png_with_their_text() {
    let (summary, histograms) = fixture();
    let data = data(summary, histograms);
    let scenario = data.scenarios().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for chart in charts::charts_for(&scenario) {
        let title = chart.title.clone();
        let (svg, files) = charts::render(&chart, dir.path()).unwrap();
        assert!(svg.contains(&title), "title in the SVG");
        for f in &files {
            assert!(std::fs::metadata(f).unwrap().len() > 1_000, "{f:?}");
        }
    }
    let svg = std::fs::read_to_string(dir.path().join("latency.e2e_latency.svg")).unwrap();
    for text in [
        "percentile",
        "99.9%",
        "latency (log scale)",
        "rate-5000 actual send",
    ] {
        assert!(svg.contains(text), "{text} in the SVG");
    }
}

/// The labels of a PNG are drawn: dark pixels where the title, the axis
/// title and the tick labels go. (tests/report.rs checks the same on the
/// binary's PNG with fontconfig pointed at an empty configuration.)
#[test]
fn png_labels_are_drawn_with_the_bundled_font() {
    let (summary, histograms) = fixture();
    let data = data(summary, histograms);
    let chart = charts::charts_for(&data.scenarios().next().unwrap())
        .into_iter()
        .next()
        .unwrap();
    let rgb = draw::to_rgb(&chart).unwrap();
    // The title, centred at the top; the x axis title, centred at the
    // bottom; the y tick labels, left of the plot.
    assert!(dark_pixels(&rgb, 200..760, 0..45) > 200, "title drawn");
    assert!(
        dark_pixels(&rgb, 300..700, 505..540) > 100,
        "x axis title drawn"
    );
    assert!(
        dark_pixels(&rgb, 20..100, 60..480) > 100,
        "y tick labels drawn"
    );

    // Control: without a title and an axis title those areas are blank,
    // so the counts above are text, not lines.
    let mut bare = chart;
    bare.title.clear();
    bare.x.label.clear();
    let rgb = draw::to_rgb(&bare).unwrap();
    assert_eq!(dark_pixels(&rgb, 200..760, 0..45), 0);
    assert_eq!(dark_pixels(&rgb, 300..700, 505..540), 0);
}

/// Near-black pixels of an RGB image of [`draw::SIZE`] inside a rectangle.
fn dark_pixels(rgb: &[u8], xs: std::ops::Range<u32>, ys: std::ops::Range<u32>) -> usize {
    let (w, _) = draw::SIZE;
    ys.flat_map(|y| xs.clone().map(move |x| ((y * w + x) * 3) as usize))
        .filter(|&i| rgb[i] < 100 && rgb[i + 1] < 100 && rgb[i + 2] < 100)
        .count()
}

#[test]
fn page_holds_metadata_tables_charts_and_verdicts_and_escapes_user_text() {
    let (mut summary, _) = fixture();
    summary.run.profile.description = "<script>alert('x')</script> & more".into();
    summary.scenarios[0].variants[0].warnings = vec!["generator fell <behind>".into()];
    let charts = vec![(
        "latency".to_string(),
        vec![
            page::PageChart {
                title: "latency: E2E".into(),
                caption: "how to read it".into(),
                svg: Ok("<svg width=\"1\" height=\"1\" xmlns=\"http://www.w3.org/2000/svg\"><text>t</text></svg>".into()),
            },
            page::PageChart {
                title: "latency: broken".into(),
                caption: String::new(),
                svg: Err("no <font>".into()),
            },
        ],
    )];
    let html = page::render(&summary, &charts, "jsbench test");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("class=\"banner verdict-passed\""));
    assert!(!html.contains("<script>"), "user text escaped");
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"));
    assert!(html.contains("generator fell &lt;behind&gt;"));
    assert!(html.contains("could not be drawn: no &lt;font&gt;"));
    assert!(html.contains("<svg width=\"1\""), "chart inlined");
    for text in [
        "2.15.1",
        "3f2a1bc9d",
        "e2e_latency.p99 (us)",
        "lost = 0",
        "✓ held",
        "persisted",
        "name = &quot;fixture&quot;",
    ] {
        assert!(html.contains(text), "{text} on the page");
    }
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("FAILED"));
    assert_balanced(&html);
}

#[test]
fn a_failed_invariant_is_impossible_to_miss() {
    let (mut summary, _) = fixture();
    summary.verdict = "failed".into();
    let v = &mut summary.scenarios[0].variants[1];
    v.passed = false;
    v.invariants[0] = Invariant::check(
        "lost = 0",
        false,
        "3 of 30000 persisted messages never delivered",
    );
    let html = page::render(&summary, &Vec::new(), "jsbench test");

    // The banner says FAILED before anything else on the page...
    let banner = html
        .find("class=\"banner verdict-failed\"")
        .expect("red banner");
    assert!(
        html[banner..]
            .starts_with("class=\"banner verdict-failed\" id=\"verdict\">FAILED: 1 problem<")
    );
    // ... followed by the list of what failed, with the evidence, above the
    // run metadata and the scenarios.
    let problems = html.find("id=\"problems\"").expect("problem list");
    let run = html.find("<section id=\"run\">").unwrap();
    let scenario = html.find("<section id=\"scenario-latency\">").unwrap();
    assert!(banner < problems && problems < run && run < scenario);
    let list = &html[problems..run];
    assert!(list.contains("latency / rate-5000"), "{list}");
    assert!(
        list.contains("invariant lost = 0 FAILED: 3 of 30000 persisted messages never delivered")
    );
    // In the scenario: a badge on the heading, a red row, and a red cell
    // with the evidence in the failing variant's column.
    assert!(html[scenario..].contains("<span class=\"badge fail\">FAILED</span>"));
    let row = html
        .find("<tr class=\"fail\"><th>lost = 0</th>")
        .expect("the failed invariant's row is red");
    let row = &html[row..row + html[row..].find("</tr>").unwrap()];
    let cells: Vec<&str> = row.split("<td").skip(1).collect();
    assert_eq!(cells.len(), 3, "{row}");
    assert!(cells[0].starts_with(" class=\"pass\">"), "{row}");
    assert!(
        cells[1].starts_with(
            " class=\"fail\"><span class=\"mark\">✗ FAILED</span><div class=\"evidence\">3 of 30000"
        ),
        "{row}"
    );
    assert!(!html.contains("class=\"banner verdict-passed\""));
}

#[test]
fn an_errored_variant_is_listed_as_a_problem() {
    let (mut summary, _) = fixture();
    summary.verdict = "failed".into();
    let v = &mut summary.scenarios[0].variants[2];
    v.passed = false;
    v.error = Some("stream create failed: <timeout>".into());
    let html = page::render(&summary, &Vec::new(), "jsbench test");
    assert!(html.contains("class=\"banner verdict-failed\""));
    assert!(html.contains("error: stream create failed: &lt;timeout&gt;"));
    assert!(html.contains("✗ ERROR"));
}

#[test]
fn ledger_rows_follow_the_life_of_a_message() {
    let (summary, _) = fixture();
    let html = page::render(&summary, &Vec::new(), "jsbench test");
    let at = |row: &str| html.find(&format!("<tr><th>{row}</th>")).unwrap();
    assert!(at("published") < at("persisted"));
    assert!(at("persisted") < at("delivered"));
    assert!(at("acked") < at("lost"));
}

#[test]
fn table_values_carry_units() {
    assert_eq!(page::format_value(212.4, "us"), "212 µs");
    assert_eq!(page::format_value(4_999.6, "msg/s"), "5,000 msg/s");
    assert_eq!(page::format_value(0.64, "MB/s"), "0.640 MB/s");
    assert_eq!(page::format_value(1_234_567.0, ""), "1,234,567");
}

#[test]
fn render_folder_writes_charts_and_page_and_removes_stale_charts() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    std::fs::create_dir_all(dir.path().join("charts")).unwrap();
    std::fs::write(dir.path().join("charts/old.svg"), "stale").unwrap();
    let out = super::render_folder(dir.path()).unwrap();
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_eq!(out.charts.len(), 10);
    assert!(!dir.path().join("charts/old.svg").exists());
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    // Every chart is on the page, inline.
    assert_eq!(html.matches("<svg ").count(), 5);
    assert_balanced(&html);
}

#[test]
fn missing_or_corrupt_histograms_are_usage_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let hdr = dir
        .path()
        .join("histograms/latency.rate-1000.e2e_latency.hdr");
    std::fs::write(&hdr, "garbage!").unwrap();
    let e = super::render_folder(dir.path()).unwrap_err();
    assert_eq!(crate::cli::exit_code(&e), crate::system::error::EXIT_USAGE);
    assert!(
        format!("{e:#}").contains("latency.rate-1000.e2e_latency.hdr"),
        "{e:#}"
    );
    std::fs::remove_file(&hdr).unwrap();
    let e = super::render_folder(dir.path()).unwrap_err();
    assert_eq!(crate::cli::exit_code(&e), crate::system::error::EXIT_USAGE);
    assert!(
        format!("{e:#}").contains("latency.rate-1000.e2e_latency.hdr"),
        "{e:#}"
    );

    std::fs::write(dir.path().join("summary.json"), "{ not json").unwrap();
    let e = super::render_folder(dir.path()).unwrap_err();
    assert_eq!(crate::cli::exit_code(&e), crate::system::error::EXIT_USAGE);
    assert!(format!("{e:#}").contains("summary.json"), "{e:#}");
}

/// Every element the builder opened is closed, in order (void elements aside).
fn assert_balanced(html: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let end = rest.find('>').expect("tag closes");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') || tag.ends_with('/') || tag.starts_with('?') {
            continue;
        }
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if ["meta", "br"].contains(&name.as_str()) {
            continue;
        }
        if tag.starts_with('/') {
            let open = stack.pop().unwrap_or_default();
            assert_eq!(open, name, "</{name}> closes <{open}>");
        } else {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

/// A chart's series as (legend, stroke).
fn lines(chart: &charts::Chart) -> Vec<(&str, Stroke)> {
    chart
        .series
        .iter()
        .map(|s| (s.label.as_str(), s.stroke))
        .collect()
}

#[test]
fn dead_letter_latency_is_drawn_from_the_final_delivery_and_the_final_deadline() {
    let (mut summary, mut histograms) = fixture();
    summary.scenarios[0].kind = "dlq".into();
    let find = |d: &ResultsData| {
        let scenario = d.scenarios().next().unwrap();
        charts::charts_for(&scenario)
            .into_iter()
            .find(|c| c.stem == "latency.dlq_latency")
    };
    let none = data(summary.clone(), histograms.clone());
    assert!(find(&none).is_none(), "no dead letters, no chart");

    histograms.push((
        "rate-1000".into(),
        "dlq_latency".into(),
        recorder(200_000, 50),
    ));
    histograms.push((
        "rate-1000".into(),
        "dlq_after_deadline".into(),
        recorder(900, 50),
    ));
    let d = data(summary, histograms);
    let chart = find(&d).expect("a chart");
    let lines = lines(&chart);
    assert_eq!(
        lines,
        [
            ("rate-1000 from final delivery", Stroke::Solid),
            ("rate-1000 from final deadline", Stroke::Dashed),
        ]
    );
}

#[test]
fn replication_lag_is_drawn_by_percentile_and_per_second() {
    let (mut summary, mut histograms) = fixture();
    summary.scenarios[0].kind = "lag".into();
    for h in ["lag", "sent_to_copy_read"] {
        histograms.push(("rate-1000".into(), h.into(), recorder(300, 50)));
    }
    let v = &mut summary.scenarios[0].variants[0];
    for (key, us) in [("p50", 300), ("p99", 900), ("max", 2_000)] {
        let seconds = Timeline {
            origin_ns: 0,
            bucket_ns: 1_000_000_000,
            counts: vec![us, us + 10, us + 20],
        };
        v.timelines.insert(format!("lag.{key}_us"), seconds);
    }
    let d = data(summary, histograms);
    let scenario = d.scenarios().next().unwrap();
    let all = charts::charts_for(&scenario);
    let chart = all
        .iter()
        .find(|c| c.stem == "latency.lag")
        .expect("a percentile chart");
    let lines = lines(chart);
    assert_eq!(
        lines,
        [
            ("rate-1000 stored to stored", Stroke::Solid),
            ("rate-1000 sent to read", Stroke::Dashed),
        ]
    );
    let stems: Vec<&str> = all.iter().map(|c| c.stem.as_str()).collect();
    for stem in [
        "latency.lag_p50_us",
        "latency.lag_p99_us",
        "latency.lag_max_us",
    ] {
        assert!(stems.contains(&stem), "{stem} in {stems:?}");
    }
    let p99 = all.iter().find(|c| c.stem == "latency.lag_p99_us").unwrap();
    assert_eq!(p99.series[0].points.len(), 3);
    assert!(p99.caption.contains("origin stored to copy stored"));
}

/// Issue 51: `jsbench report` followed a symlinked `charts` folder and
/// deleted the `.svg` and `.png` files it found there, and read histogram
/// files through symlinks without a size limit (`/dev/zero` grew without
/// end).
#[test]
fn report_deletes_nothing_through_a_symlink_and_reads_no_device() {
    let elsewhere = tempfile::tempdir().unwrap();
    let precious = elsewhere.path().join("precious.svg");
    std::fs::write(&precious, "not jsbench's").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("charts")).unwrap();
    let e = super::render_folder(dir.path()).unwrap_err();
    assert_eq!(crate::cli::exit_code(&e), crate::system::error::EXIT_USAGE);
    assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
    assert!(precious.is_file(), "the file behind the link is kept");

    // A stale chart that is a symlink is removed as a link, never followed,
    // and a write never lands through a link at its temporary name.
    std::fs::remove_file(dir.path().join("charts")).unwrap();
    std::fs::create_dir(dir.path().join("charts")).unwrap();
    std::os::unix::fs::symlink(&precious, dir.path().join("charts/old.svg")).unwrap();
    std::os::unix::fs::symlink(&precious, dir.path().join("report.tmp")).unwrap();
    super::render_folder(dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "not jsbench's");

    let hdr = dir
        .path()
        .join("histograms/latency.rate-1000.e2e_latency.hdr");
    std::fs::remove_file(&hdr).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &hdr).unwrap();
    let e = super::render_folder(dir.path()).unwrap_err();
    assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
}
