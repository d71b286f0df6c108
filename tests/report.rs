//! Charts and report.html as a user meets them: written by `jsbench run`,
//! drawn again by `jsbench report` from the folder's files alone.

mod common;

use std::fs;
use std::path::Path;

use common::{jsbench, run, text};

/// The charts a latency rate sweep gets, the server's telemetry included
/// (from the embedded server's endpoint, or --monitor's).
const CHARTS: [&str; 10] = [
    "latency.e2e_latency",
    "latency.pub_ack_latency",
    "latency.send_lag",
    "latency.e2e_latency_p50_us",
    "latency.e2e_latency_p99_us",
    "latency.e2e_latency_max_us",
    "latency.throughput",
    "latency.latency_vs_throughput",
    "latency.server_mem_mb",
    "latency.server_cpu_pct",
];

fn assert_charts(results: &Path) {
    for stem in CHARTS {
        for ext in ["svg", "png"] {
            let path = results.join("charts").join(format!("{stem}.{ext}"));
            let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            match ext {
                "png" => assert!(bytes.starts_with(b"\x89PNG\r\n"), "{path:?} is a PNG"),
                _ => assert!(bytes.starts_with(b"<svg"), "{path:?} is an SVG"),
            }
        }
    }
}

#[test]
fn run_writes_charts_and_an_offline_report_and_report_redraws_them() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let path = common::profile(
        dir.path(),
        "pictures",
        // Two seconds at least: the per-second charts need two seconds.
        &common::latency_body("[300, 1000]", "2s", "200ms", ""),
    );
    // A server the test started: its telemetry through --monitor.
    let out = run(jsbench()
        .args(["run", path.to_str().unwrap(), "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .args(["--monitor", server.monitor_url().unwrap()])
        .env("NATS_URL", server.url()));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let results = common::results_dir(&dir.path().join("results"));
    assert_charts(&results);

    let html = fs::read_to_string(results.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Self-contained: no URL at all, nothing loaded from anywhere.
    if let Some(at) = html.find("http://").or_else(|| html.find("https://")) {
        // By characters: the report holds multi-byte text (≤, µ).
        let before: Vec<char> = html[..at].chars().rev().take(120).collect();
        let before: String = before.into_iter().rev().collect();
        let after: String = html[at..].chars().take(120).collect();
        panic!("report.html names a URL: {before}{after}");
    }
    assert!(!html.contains(" src="), "report.html loads a resource");
    assert!(!html.contains("<link"), "report.html links a resource");
    // Every chart inline, with its title; the verdicts; the run metadata.
    assert_eq!(html.matches("<svg ").count(), CHARTS.len());
    for text in [
        "class=\"banner verdict-passed\"",
        "End-to-end latency by percentile",
        "Latency vs throughput",
        "Server memory over time",
        "Server CPU over time",
        "server_peak_mem (MB)",
        "lost = 0",
        "every payload carries its stamp",
        "✓ held",
        "rate-300",
        "rate-1000",
        "nats-server 2.15.1",
        "e2e_latency.p99 (us)",
        "CPU per message: client and server",
        "client share of a message&#39;s CPU",
    ] {
        assert!(html.contains(text), "report.html shows {text:?}");
    }

    // Gone, then drawn again from summary.json and histograms/ alone: the
    // same page, byte for byte.
    fs::remove_dir_all(results.join("charts")).unwrap();
    fs::remove_file(results.join("report.html")).unwrap();
    // With fontconfig pointed at an empty configuration: no system font
    // can be found, and the PNGs must still carry their text.
    let fontconfig = dir.path().join("fontconfig");
    fs::create_dir(&fontconfig).unwrap();
    fs::write(
        fontconfig.join("fonts.conf"),
        "<?xml version=\"1.0\"?>\n<fontconfig></fontconfig>\n",
    )
    .unwrap();
    let out = run(jsbench()
        .arg("report")
        .arg(&results)
        .env("FONTCONFIG_FILE", fontconfig.join("fonts.conf"))
        .env("FONTCONFIG_PATH", &fontconfig)
        .env("XDG_DATA_HOME", &fontconfig)
        .env("HOME", &fontconfig));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("e2e p50"), "prints the table: {stdout}");
    assert_png_has_text(&results.join("charts/latency.e2e_latency.png"));
    assert!(stdout.contains("report.html"), "{stdout}");
    assert_charts(&results);
    let again = fs::read_to_string(results.join("report.html")).unwrap();
    assert!(
        again == html,
        "re-rendered report.html differs from the run's"
    );

    // The summary.json path works as well as the folder.
    let out = run(jsbench().arg("report").arg(results.join("summary.json")));
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));

    // Unusable input: exit 2 and the file named.
    let hdr = results.join("histograms/latency.rate-300.e2e_latency.hdr");
    fs::write(&hdr, "not a histogram").unwrap();
    let out = run(jsbench().arg("report").arg(&results));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("latency.rate-300.e2e_latency.hdr"),
        "{stderr}"
    );
    fs::remove_file(results.join("summary.json")).unwrap();
    let out = run(jsbench().arg("report").arg(&results));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("summary.json"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = run(jsbench().arg("report").arg(dir.path().join("nowhere")));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nowhere"), "{stderr}");
}

/// Dark pixels where the title and the x axis title of a 960x540 chart go.
fn assert_png_has_text(path: &Path) {
    let decoder = png::Decoder::new(fs::File::open(path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (960, 540), "{path:?}");
    let channels = info.line_size / info.width as usize;
    let dark = |xs: std::ops::Range<usize>, ys: std::ops::Range<usize>| {
        ys.flat_map(|y| {
            xs.clone()
                .map(move |x| (y * info.width as usize + x) * channels)
        })
        .filter(|&i| buf[i] < 100 && buf[i + 1] < 100 && buf[i + 2] < 100)
        .count()
    };
    assert!(dark(200..760, 0..45) > 200, "no title text in {path:?}");
    assert!(dark(300..700, 505..540) > 100, "no axis title in {path:?}");
}
