//! The progress bar on long runs: hidden when stderr is not a terminal, so
//! CI logs and pipes get plain lines instead of control characters.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, nothing otherwise.
    Auto,
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
        Progress {
            enabled: mode == ProgressMode::Auto && terminal,
        }
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

pub struct VariantBar {
    bar: ProgressBar,
}

impl VariantBar {
    /// `rate` is the recent publish rate, msg/s.
    pub fn update(&self, elapsed: Duration, sent: u64, received: u64, rate: f64) {
        self.bar.set_position(elapsed.as_millis() as u64);
        if received > 0 {
            self.bar
                .set_message(format!("sent {sent} ({rate:.0}/s)  received {received}"));
        } else {
            self.bar.set_message(format!("sent {sent} ({rate:.0}/s)"));
        }
    }

    pub fn phase(&self, text: &str) {
        self.bar.set_message(text.to_string());
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
