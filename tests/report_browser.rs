//! report.html as a person sees it: headless Chromium (installed by
//! scripts/setup.sh) opens the page from disk with the network off and
//! takes a screenshot, and every chart must be on it.

mod common;

use std::fs;

use common::browser::{pixels, screenshot};
use common::{jsbench, run, text};

#[test]
fn every_chart_is_visible_in_a_screenshot_of_the_offline_report() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let path = common::profile(
        dir.path(),
        "browser",
        &common::latency_body("[300, 1000]", "500ms", "200ms", ""),
    );
    let out = run(jsbench()
        .args(["run", path.to_str().unwrap(), "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .env("NATS_URL", server.url()));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let results = common::results_dir(&dir.path().join("results"));
    let charts = fs::read_dir(results.join("charts"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "svg")
        })
        .count();
    assert!(charts >= 5, "{charts} charts");

    // Tall enough for the whole page: the header and tables, then each
    // chart at about 600 px.
    let shot = dir.path().join("report.png");
    let size = (1200, 1_600 + 650 * charts as u32);
    screenshot(
        &results.join("report.html"),
        &shot,
        size,
        &dir.path().join("chromium-profile"),
    );
    let (buf, width, height, channels) = pixels(&shot);
    assert_eq!((width, height), (size.0 as usize, size.1 as usize));

    // Each chart is an inline SVG with a light grey frame (#e0e0e0, 1 px,
    // 960 px wide): rows holding a long run of that grey are the frames'
    // top and bottom edges (plot grid lines are grey too, but shorter).
    let px = |x: usize, y: usize| {
        let i = (y * width + x) * channels;
        (buf[i] as i32, buf[i + 1] as i32, buf[i + 2] as i32)
    };
    let frame_rows: Vec<usize> = (0..height)
        .filter(|&y| {
            let mut run = 0;
            (0..width).any(|x| {
                let (r, g, b) = px(x, y);
                let grey = (r - 224).abs() <= 4 && (g - 224).abs() <= 4 && (b - 224).abs() <= 4;
                run = if grey { run + 1 } else { 0 };
                run >= 900
            })
        })
        .collect();
    let mut edges: Vec<usize> = Vec::new();
    for y in frame_rows {
        if edges.last().is_none_or(|&last| y > last + 2) {
            edges.push(y);
        }
    }
    assert_eq!(
        edges.len(),
        2 * charts,
        "a frame per chart in the screenshot (frame edges at rows {edges:?})"
    );
    // Inside every frame, the lines: pixels in the charts' palette colours.
    const PALETTE: [(i32, i32, i32); 7] = [
        (0, 114, 178),
        (213, 94, 0),
        (0, 158, 115),
        (204, 121, 167),
        (230, 159, 0),
        (86, 180, 233),
        (0, 0, 0),
    ];
    for frame in edges.chunks(2) {
        let coloured = (frame[0]..frame[1])
            .flat_map(|y| (0..width).map(move |x| (x, y)))
            .filter(|&(x, y)| {
                let (r, g, b) = px(x, y);
                PALETTE[..6].iter().any(|&(pr, pg, pb)| {
                    (r - pr).abs() <= 25 && (g - pg).abs() <= 25 && (b - pb).abs() <= 25
                })
            })
            .count();
        assert!(
            coloured >= 300,
            "the chart framed at rows {frame:?} shows no lines ({coloured} coloured pixels)"
        );
    }
}
