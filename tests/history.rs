//! `jsbench history` as CI meets it: made-up results folders of a small git
//! repository's commits, read in git order (their start times are
//! scrambled on purpose), appended to a history file and read back; exit 1
//! on a regression at the newest change point, 0 on noise, 2 on bad input;
//! and history.html in a real browser, every chart on the screenshot with
//! its change point and the broken check marked.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::browser::{dom, pixels, screenshot};
use common::{jsbench, run, text};
use serde_json::{Value, json};

/// A minimal summary, as old as the schema gets: only the fields every
/// version wrote (no repeat, no peak_rss, no connection, ...).
fn summary(id: &str, started: &str, commit: &str, rate: f64, p50: f64, lost: bool) -> Value {
    json!({
        "schema_version": 1,
        "run": {
            "id": id, "started_at": started, "finished_at": started,
            "tool": {"name": "jsbench", "version": "0.1.0", "git_commit": commit, "git_dirty": false},
            "server": {"mode": "embedded", "version": "2.15.1", "urls": "nats://127.0.0.1:1",
                       "server_name": "s", "cluster": null, "jetstream_domain": null,
                       "storage": "file", "replicas": 1},
            "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": 8589934592u64,
                     "cpu_model": "cpu", "hostname": id},
            "profile": {"name": "ci", "source": "ci", "description": "", "text": ""},
        },
        "scenarios": [{
            "name": "publish", "kind": "publish",
            "variants": [{
                "name": "max", "passed": !lost, "params": {},
                "metrics": [
                    {"name": "target_rate", "unit": "msg/s", "value": 0.0, "direction": "none"},
                    {"name": "publish_rate", "unit": "msg/s", "value": rate, "direction": "higher"},
                    {"name": "pub_ack_latency.p50", "unit": "us", "value": p50, "direction": "lower"},
                ],
                "histograms": [],
                "ledger": {"published": 10, "publish_errors": 0, "persisted": 10, "duplicates": 0,
                           "delivered": 10, "deliveries": 10, "redelivered": 0, "redeliveries": 0,
                           "acked": 10, "lost": if lost { 2 } else { 0 }},
                "invariants": [{"name": "lost = 0", "passed": !lost,
                                "detail": if lost { "2 (expected 0)" } else { "0 (expected 0)" }}],
                "warnings": [], "timelines": {}, "error": null, "elapsed_s": 1.0,
            }],
        }],
        "verdict": if lost { "failed" } else { "passed" },
    })
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository of `n` empty commits; their shas, oldest first.
fn repository(dir: &Path, n: usize) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    (0..n)
        .map(|i| {
            git(
                dir,
                &[
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "commit",
                    "-q",
                    "--allow-empty",
                    "-m",
                    &format!("commit {i}"),
                ],
            );
            git(dir, &["rev-parse", "HEAD"])
        })
        .collect()
}

/// Noise of about ±1%, the same every run of the test.
fn wobble(i: usize) -> f64 {
    [0.0, 0.8, -0.6, 0.3, -0.9, 0.5, -0.2, 0.9, -0.4, 0.1][i % 10] / 100.0
}

/// One results folder per commit; the rate falls by `step` from commit
/// `at` on; the run of commit `lost_at` loses messages. Start times run
/// backwards, so only git order puts the runs right.
fn folders(root: &Path, shas: &[String], at: usize, step: f64, lost_at: Option<usize>) -> PathBuf {
    let runs = root.join("runs");
    for (i, sha) in shas.iter().enumerate() {
        let level = if i >= at { 1.0 + step } else { 1.0 };
        let rate = 50_000.0 * level * (1.0 + wobble(i));
        let p50 = 200.0 * (1.0 - wobble(i + 3));
        let started = format!("2026-01-01T00:{:02}:00Z", 59 - i);
        let folder = runs.join(format!("run-{i:02}"));
        std::fs::create_dir_all(&folder).unwrap();
        let s = summary(
            &format!("run-{i:02}"),
            &started,
            sha,
            rate,
            p50,
            lost_at == Some(i),
        );
        std::fs::write(
            folder.join("summary.json"),
            serde_json::to_vec_pretty(&s).unwrap(),
        )
        .unwrap();
        std::fs::write(folder.join("report.html"), "<html></html>").unwrap();
    }
    runs
}

fn history(args: &[&Path], extra: &[&str]) -> (Option<i32>, String, String) {
    let out = run(jsbench().arg("history").args(args).args(extra));
    let (stdout, stderr) = text(&out);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stdout, stderr)
}

/// `jsbench history RUNS --repo REPO -o OUT`: the runs in git order.
fn in_git(runs: &Path, repo: &Path, out: &Path) -> (Option<i32>, String, String) {
    history(
        &[runs],
        &[
            "--repo",
            repo.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    )
}

#[test]
fn history_exits_1_on_a_newest_regression_0_on_noise_2_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let shas = repository(&repo, 16);
    let out = dir.path().join("out");

    // A 15% fall in the publish rate at commit 10 of 16.
    let runs = folders(&dir.path().join("fell"), &shas, 10, -0.15, Some(4));
    let (code, stdout, stderr) = in_git(&runs, &repo, &out);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let range = format!("{}..{}", &shas[9][..7], &shas[10][..7]);
    assert!(
        stdout.contains("publish/max/publish_rate") && stdout.contains(&range),
        "{stdout}"
    );
    assert!(
        stdout.contains("Broken checks") && stdout.contains("lost = 0"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("target_rate"),
        "context is not analysed: {stdout}"
    );
    let html = std::fs::read_to_string(out.join("history.html")).unwrap();
    assert!(
        html.contains("<svg") && html.contains("report.html"),
        "history.html has charts and links"
    );
    assert!(out.join("history.md").is_file());

    // The same runs appended to a history file (twice: kept once) read the same.
    let file = dir.path().join("bench-history/history.jsonl");
    for expected in ["16 run(s) appended", "0 run(s) appended"] {
        let (code, stdout, stderr) = history(&[&runs], &["--append", file.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains(expected), "{stdout}");
    }
    let (code, from_file, _) = in_git(&file, &repo, &out);
    assert_eq!(code, Some(1));
    assert!(from_file.contains(&range), "{from_file}");

    // A fall within the threshold, and noise alone: exit 0.
    let (code, stdout, _) = history(
        &[&runs],
        &[
            "--repo",
            repo.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--threshold",
            "20%",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    let quiet = folders(&dir.path().join("quiet"), &shas, 16, 0.0, None);
    let (code, stdout, _) = in_git(&quiet, &repo, &out);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("No change points"), "{stdout}");

    // Bad input: exit 2, naming what is wrong.
    let missing = dir.path().join("nowhere");
    let (code, _, stderr) = history(&[&missing], &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("nowhere"), "{stderr}");
    let bad = dir.path().join("bad.jsonl");
    let first = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    std::fs::write(&bad, format!("{first}\n{{\"not\": \"a record\"}}\n")).unwrap();
    let (code, _, stderr) = history(&[&bad], &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("bad.jsonl line 2"), "{stderr}");
    let (code, _, stderr) = history(
        &[&runs],
        &["--repo", dir.path().join("fell").to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--repo"), "{stderr}");
    let (code, _, stderr) = history(&[], &[]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// A real history: the ci profile run four times (in rounds) on each of
/// this repository's ten commits 9493951..8afa059 on the project's 2-core
/// machine, 2026-12-06, while other builds shared it; kept as the history
/// file `jsbench history --append` writes, trimmed to the profile's
/// judged metrics (docs/history.md, "What a real history showed").
const REAL: &str = "tests/data/history-ci-10-commits.jsonl";

#[test]
fn a_real_history_of_ten_commits_reads_the_same_way_every_time() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join(REAL);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("time");
    // In time order the fourth round, which ran beside a compile, is a
    // step down in both publish rates: the newest change points are
    // regressions, and the broken checks are listed as events.
    let (code, stdout, stderr) = history(&[&data], &["-o", out.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let md = std::fs::read_to_string(out.join("history.md")).unwrap();
    for series in [
        "publish/rate-max.id-none/publish_rate -22.5%",
        "publish/rate-max.id-unique/publish_rate -57.3%",
    ] {
        assert!(md.contains(series), "{series} in\n{md}");
    }
    assert_eq!(
        md.matches("no redelivery earlier than configured").count(),
        6,
        "{md}"
    );
    assert!(out.join("history.html").is_file());
    // In git order every commit's four runs sit together, the disturbed
    // round spread over all ten: no change point, exit 0. A checkout
    // without these commits (a shallow clone) cannot order them and says
    // so with exit 2.
    let sha = "9493951f041f2a3a4c80db975c9758c44c3f8ca4";
    let known = Command::new("git")
        .args(["-C", root.to_str().unwrap(), "cat-file", "-e"])
        .arg(format!("{sha}^{{commit}}"))
        .status()
        .is_ok_and(|s| s.success());
    let out = dir.path().join("git");
    let (code, stdout, stderr) = in_git(&data, root, &out);
    if known {
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let md = std::fs::read_to_string(out.join("history.md")).unwrap();
        assert!(md.contains("No change points."), "{md}");
    } else {
        assert_eq!(code, Some(2), "{stdout}\n{stderr}");
        assert!(stderr.contains("no runs to analyse"), "{stderr}");
    }
}

#[test]
fn history_html_shows_every_chart_with_its_change_point_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let shas = repository(&repo, 16);
    let runs = folders(&dir.path().join("fell"), &shas, 8, -0.2, Some(4));
    let out = dir.path().join("out");
    let (code, stdout, stderr) = in_git(&runs, &repo, &out);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");

    // 600 px wide: the charts (460 px) stack one under another.
    let size = (600, 2400);
    let shot = std::env::var_os("JSBENCH_HISTORY_SHOT")
        .map_or_else(|| dir.path().join("history.png"), PathBuf::from);
    screenshot(
        &out.join("history.html"),
        &shot,
        size,
        &dir.path().join("chromium-profile"),
    );
    let (buf, width, height, channels) = pixels(&shot);
    let px = |x: usize, y: usize| {
        let i = (y * width + x) * channels;
        (buf[i] as i32, buf[i + 1] as i32, buf[i + 2] as i32)
    };
    let near = |(r, g, b): (i32, i32, i32), (pr, pg, pb): (i32, i32, i32)| {
        (r - pr).abs() <= 30 && (g - pg).abs() <= 30 && (b - pb).abs() <= 30
    };
    // Each chart's frame (#e0e0e0, 460 px): rows with a long grey run.
    let mut edges: Vec<usize> = Vec::new();
    for y in 0..height {
        let mut grey = 0;
        let framed = (0..width).any(|x| {
            grey = if near(px(x, y), (224, 224, 224)) && (px(x, y).0 - 224).abs() <= 4 {
                grey + 1
            } else {
                0
            };
            grey >= 440
        });
        if framed && edges.last().is_none_or(|&last| y > last + 2) {
            edges.push(y);
        }
    }
    // publish_rate and pub_ack_latency.p50: two charts, two edges each.
    assert_eq!(edges.len(), 4, "frame edges at rows {edges:?}");
    for frame in edges.chunks(2) {
        let count = |colour| {
            (frame[0]..frame[1])
                .flat_map(|y| (0..width).map(move |x| (x, y)))
                .filter(|&(x, y)| near(px(x, y), colour))
                .count()
        };
        assert!(
            count((0, 114, 178)) >= 100,
            "no dots in the chart at rows {frame:?}"
        );
        assert!(
            count((0, 158, 115)) >= 100,
            "no medians in the chart at rows {frame:?}"
        );
        assert!(
            count((204, 0, 0)) >= 10,
            "no broken-check mark in the chart at rows {frame:?}"
        );
    }
    // The rate's fall is a change point (its dashed line); the latency,
    // noise only, has none.
    let orange: Vec<usize> = edges
        .chunks(2)
        .map(|frame| {
            (frame[0]..frame[1])
                .flat_map(|y| (0..width).map(move |x| (x, y)))
                .filter(|&(x, y)| near(px(x, y), (213, 94, 0)))
                .count()
        })
        .collect();
    assert!(
        orange.iter().filter(|&&n| n >= 60).count() == 1 && orange.contains(&0),
        "one chart with a change point's line, one without: {orange:?} pixels"
    );
}

/// Issue 51: a results folder named like a script, under the page's own
/// folder, became a link a browser follows as `javascript:`. The page as
/// the browser holds it has no link but http(s) and paths, and the folder
/// is still linked, as a path.
#[test]
fn history_html_in_a_browser_links_no_script_whatever_a_folder_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let shas = repository(&repo, 4);
    let runs = folders(&dir.path().join("named"), &shas, 99, 0.0, None);
    let hostile = "javascript:alert(document.domain)";
    std::fs::rename(runs.join("run-00"), runs.join(hostile)).unwrap();
    // The page in the runs' own folder: the link to a run is its name.
    let (code, stdout, stderr) = in_git(&runs, &repo, &runs);
    assert!(matches!(code, Some(0 | 3)), "{code:?}\n{stdout}\n{stderr}");
    let dom = dom(
        &runs.join("history.html"),
        &dir.path().join("chromium-profile"),
    );
    let hrefs: Vec<&str> = dom
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(!hrefs.is_empty(), "no links in the page:\n{dom}");
    for href in &hrefs {
        let lower = href.to_ascii_lowercase();
        let scheme = lower
            .split_once(':')
            .map(|(s, _)| s)
            .filter(|s| !s.contains('/'));
        assert!(
            matches!(scheme, None | Some("http" | "https")),
            "a link a browser follows as {scheme:?}: {href}"
        );
    }
    assert!(
        hrefs.iter().any(|h| h.starts_with("./javascript:alert")),
        "the run is still linked, as a path: {hrefs:?}"
    );
}
