//! The progress bar on long runs: hidden when stderr is not a terminal, so
//! CI logs and pipes get plain lines instead of control characters.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// `run --progress`. (A plain comment below, not a doc comment: clap
/// would show it beside the value.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProgressMode {
    // A bar when stderr is a terminal, nothing otherwise.
    Auto,
    #[default]
    Never,
}

#[derive(Debug, Clone)]
pub struct Progress {
    enabled: bool,
}

impl Progress {
    pub fn new(mode: ProgressMode) -> Self {
        let terminal =
            std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
        let enabled = mode == ProgressMode::Auto && terminal;
        if enabled {
            // The bar shows the running variant's p99 from the live
            // histogram.
            crate::system::live::enable();
        }
        Progress { enabled }
    }

    pub fn hidden() -> Self {
        Progress { enabled: false }
    }

    /// A bar for one variant's timed phase.
    pub fn variant(&self, label: &str, planned: Duration) -> VariantBar {
        let bar = if self.enabled {
            let bar = ProgressBar::with_draw_target(
                Some(planned.as_millis().max(1) as u64),
                ProgressDrawTarget::stderr_with_hz(10),
            );
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} [{bar:24.cyan/blue}] {elapsed:>3} {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(label.to_string());
            bar
        } else {
            ProgressBar::hidden()
        };
        VariantBar { bar }
    }

    /// Prints a line that must not be torn by the bar.
    pub fn println(&self, line: &str) {
        eprintln!("{line}");
    }
}

/// `12.3k/s p99 1.24ms ok`: what a running variant shows beside its bar
/// (under 30 columns, so the line fits 80).
fn status_line(sent: u64, received: u64, rate: f64, p99_s: Option<f64>, failed: u64) -> String {
    let rate = if rate >= 1e6 {
        format!("{:.1}M/s", rate / 1e6)
    } else if rate >= 1e4 {
        format!("{:.1}k/s", rate / 1e3)
    } else {
        format!("{rate:.0}/s")
    };
    let p99 = match p99_s {
        Some(s) if s >= 1.0 => format!(" p99 {s:.0}s"),
        Some(s) if s >= 1e-3 => format!(" p99 {:.2}ms", s * 1e3),
        Some(s) => format!(" p99 {:.0}us", s * 1e6),
        None if sent > 0 && received == 0 => " waiting".to_string(),
        None => String::new(),
    };
    let state = if failed == 0 {
        " ok".to_string()
    } else {
        format!(" {failed} FAILED")
    };
    format!("{rate}{p99}{state}")
}

pub struct VariantBar {
    bar: ProgressBar,
}

impl VariantBar {
    /// `rate` is the recent publish rate, msg/s. Beside the bar: the
    /// rate, the variant's end-to-end p99 so far, and whether every
    /// invariant of the run has held so far, in under 30 columns.
    pub fn update(&self, elapsed: Duration, sent: u64, received: u64, rate: f64) {
        if self.bar.is_hidden() {
            return;
        }
        self.bar.set_position(elapsed.as_millis() as u64);
        let (p99, failed) = crate::system::live::so_far();
        self.bar
            .set_message(status_line(sent, received, rate, p99, failed));
    }

    pub fn phase(&self, text: &str) {
        self.bar.set_message(text.to_string());
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_fits_beside_the_bar() {
        assert_eq!(
            status_line(10, 5, 12_345.0, Some(0.00124), 0),
            "12.3k/s p99 1.24ms ok"
        );
        assert_eq!(
            status_line(10, 5, 800.0, Some(0.000250), 2),
            "800/s p99 250us 2 FAILED"
        );
        assert_eq!(status_line(10, 0, 800.0, None, 0), "800/s waiting ok");
        let widest = status_line(1, 1, 9_999_999.0, Some(3_599.0), 999);
        assert!(widest.len() <= 30, "{widest}: {}", widest.len());
    }
}
