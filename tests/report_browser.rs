//! report.html as a person sees it: headless Chromium (installed by
//! scripts/setup.sh) opens the page from disk with the network off and
//! takes a screenshot, and every chart must be on it.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{jsbench, run, text};

/// The browser: `CHROMIUM_BIN`, or `chromium` on PATH; the test fails (never
/// skips) with the install command when neither is there.
fn chromium() -> PathBuf {
    if let Some(bin) = std::env::var_os("CHROMIUM_BIN") {
        return bin.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium not found: run scripts/setup.sh (it installs Debian's chromium), or set CHROMIUM_BIN"
            )
        })
}

/// Screenshots `page` at `size` into `png`, giving up after a minute.
fn screenshot(page: &Path, png: &Path, size: (u32, u32), profile: &Path) {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            // jsbench's tests run as root in CI, where the sandbox refuses to start.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            // Offline: any attempt to fetch something fails instead of loading.
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", chromium()));
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish its screenshot within a minute");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Pixels of an RGB(A) PNG, with its width, height and bytes per pixel.
fn pixels(png_path: &Path) -> (Vec<u8>, usize, usize, usize) {
    let decoder = png::Decoder::new(fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.line_size / info.width as usize;
    assert!(channels >= 3, "screenshot is not RGB: {channels} channels");
    (buf, info.width as usize, info.height as usize, channels)
}

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
