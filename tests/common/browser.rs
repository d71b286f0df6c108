//! A page as a person sees it: headless Chromium (installed by
//! scripts/setup.sh) opens it from disk with the network off and takes a
//! screenshot, which the tests read back pixel by pixel (report.html in
//! tests/report_browser.rs, history.html in tests/history.rs).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The browser: `CHROMIUM_BIN`, or `chromium` on PATH; the test fails (never
/// skips) with the install command when neither is there.
pub fn chromium() -> PathBuf {
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
pub fn screenshot(page: &Path, png: &Path, size: (u32, u32), profile: &Path) {
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

/// The DOM of `page` once the browser has loaded it (scripts run), as
/// HTML: what a reader's browser would hold, links included.
pub fn dom(page: &Path, profile: &Path) -> String {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", chromium()));
    assert!(out.status.success(), "chromium failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Pixels of an RGB(A) PNG, with its width, height and bytes per pixel.
pub fn pixels(png_path: &Path) -> (Vec<u8>, usize, usize, usize) {
    let decoder = png::Decoder::new(fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.line_size / info.width as usize;
    assert!(channels >= 3, "screenshot is not RGB: {channels} channels");
    (buf, info.width as usize, info.height as usize, channels)
}
