//! How far the cycle-counter clock strays from CLOCK_MONOTONIC: the
//! process clock as jsbench runs it (re-anchored four times a second)
//! beside two that are calibrated once and never again (for 1 ms, as the
//! process clock starts, and for 100 ms), sampled every 100 ms for
//! `JSBENCH_DRIFT_SECS` seconds (default 60).
//!
//! `cargo bench --bench clock_drift` prints, per clock, the offset from
//! CLOCK_MONOTONIC at the end, the largest seen, and the drift rate of a
//! least-squares line through the samples with what it would accumulate
//! over a ten-minute run.

use std::time::Duration;

use jsbench::record::clock;
use jsbench::record::tsc::TscClock;

struct Series {
    name: &'static str,
    samples: Vec<(f64, f64)>,
}

impl Series {
    fn report(&self) {
        let n = self.samples.len() as f64;
        let (sx, sy) = self
            .samples
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let (num, den) = self.samples.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
            (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
        });
        let slope_ns_per_s = num / den;
        let mut abs: Vec<f64> = self.samples.iter().map(|s| s.1.abs()).collect();
        abs.sort_by(f64::total_cmp);
        let p99 = abs[(abs.len() * 99 / 100).min(abs.len() - 1)];
        let (at, max) = self
            .samples
            .iter()
            .map(|s| (s.0, s.1.abs()))
            .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        let last = self.samples.last().map_or(0.0, |s| s.1);
        println!(
            "{:<34} end {:>9.0} ns  p99 |offset| {:>9.0} ns  max {:>9.0} ns (at {:>5.1} s)  drift {:>7.3} ppm  -> {:>8.1} us over 10 min",
            self.name,
            last,
            p99,
            max,
            at,
            slope_ns_per_s / 1_000.0,
            slope_ns_per_s * 600.0 / 1_000.0
        );
    }
}

fn main() {
    let secs: u64 = match std::env::var("JSBENCH_DRIFT_SECS") {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            panic!("JSBENCH_DRIFT_SECS={v:?} is not a whole number of seconds")
        }),
        Err(_) => 60,
    };
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` asks every target for its benches
    }
    println!("clock source: {}", clock::source());
    let once_1ms = TscClock::new(0, 1_000_000, false).expect("the counter is usable");
    let once_100ms = TscClock::new(0, 100_000_000, false).expect("the counter is usable");
    let mut series = [
        Series {
            name: "re-anchored (the process clock)",
            samples: Vec::new(),
        },
        Series {
            name: "calibrated once, 1 ms",
            samples: Vec::new(),
        },
        Series {
            name: "calibrated once, 100 ms",
            samples: Vec::new(),
        },
    ];
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let t = start.elapsed().as_secs_f64();
        // Keep the clocks read as a loop would read them, between samples.
        for _ in 0..10_000 {
            std::hint::black_box(clock::now_ns());
            std::hint::black_box(once_1ms.now_ns());
            std::hint::black_box(once_100ms.now_ns());
        }
        let offsets = [
            clock::offset_from_monotonic_ns(),
            once_1ms.offset_from_monotonic(),
            once_100ms.offset_from_monotonic(),
        ];
        for (s, off) in series.iter_mut().zip(offsets) {
            s.samples.push((t, off as f64));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("{secs} s, {} samples each:", series[0].samples.len());
    for s in &series {
        s.report();
    }
}
