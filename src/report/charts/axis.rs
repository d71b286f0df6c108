//! Axis scales, tick positions and tick labels, as plain arithmetic.
//!
//! Every chart is drawn on linear coordinates: data are mapped into the
//! axis's own space here (log10 for a log axis, "nines" for percentiles),
//! ticks are chosen here, and labels map back. Doing it ourselves, rather
//! than through plotters' coordinate types, gives one drawing path for
//! every combination of scales and lets the tests check the arithmetic
//! without drawing anything.

use crate::results::ci::without_trailing_zeros;

/// How values are laid out along an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Decades equally spaced; values at or below zero sit on the floor.
    Log,
    /// Quantiles (0.5 = median) spaced by their number of nines: 90%, 99%,
    /// 99.9% and 99.99% equally far apart, which is where latency tails live.
    Nines,
}

/// What the numbers on an axis are, so tick labels can carry the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds, labelled with a unit that fits (µs, ms, s).
    Micros,
    /// Plain quantities (messages per second, seconds, counts): 1.5k, 2M.
    Number,
    /// A quantile 0..1, labelled as a percentage.
    Quantile,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The axis title, units included ("latency (log scale)",
    /// "time since start (s)").
    pub label: String,
    pub scale: Scale,
    pub unit: Unit,
}

impl Axis {
    pub fn new(label: impl Into<String>, scale: Scale, unit: Unit) -> Axis {
        Axis {
            label: label.into(),
            scale,
            unit,
        }
    }

    /// Time along the bottom, from each variant's first send.
    pub fn time() -> Axis {
        Axis::new(
            "time since the variant's first send (s)",
            Scale::Linear,
            Unit::Number,
        )
    }
}

/// The lowest quantile and highest quantile a nines axis shows.
pub const NINES_RANGE: (f64, f64) = (0.5, 0.9999);

/// Smallest value a log axis shows; zeros (a send lag below the clock's
/// resolution) are drawn here rather than dropped.
const LOG_FLOOR: f64 = 1e-3;

impl Scale {
    /// Maps a data value into drawing space.
    pub fn forward(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log => v.max(LOG_FLOOR).log10(),
            Scale::Nines => -(1.0 - v.clamp(0.0, 0.999_999_9)).log10(),
        }
    }

    /// Maps a drawing-space position back to a data value.
    pub fn inverse(self, t: f64) -> f64 {
        match self {
            Scale::Linear => t,
            Scale::Log => 10f64.powf(t),
            Scale::Nines => 1.0 - 10f64.powf(-t),
        }
    }

    /// The drawn range (in drawing space) for data spanning `lo..=hi`.
    pub fn range(self, lo: f64, hi: f64, from_zero: bool) -> (f64, f64) {
        match self {
            Scale::Nines => (self.forward(NINES_RANGE.0), self.forward(NINES_RANGE.1)),
            Scale::Log => {
                let (a, b) = (self.forward(lo), self.forward(hi));
                // A tenth of a decade of air either side; at least one
                // decade in all, so a flat line still has ticks around it.
                let pad = ((b - a) * 0.05).max(0.1);
                let (mut a, mut b) = (a - pad, b + pad);
                if b - a < 1.0 {
                    let mid = (a + b) / 2.0;
                    a = mid - 0.5;
                    b = mid + 0.5;
                }
                (a, b)
            }
            Scale::Linear => {
                let lo = if from_zero { lo.min(0.0) } else { lo };
                let span = hi - lo;
                if span <= 0.0 {
                    let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
                    return (lo - if from_zero { 0.0 } else { pad }, hi + pad);
                }
                let below = if from_zero && lo >= 0.0 {
                    0.0
                } else {
                    span * 0.03
                };
                (lo - below, hi + span * 0.05)
            }
        }
    }

    /// Tick positions (drawing space) inside `lo..=hi` (drawing space).
    pub fn ticks(self, lo: f64, hi: f64) -> Vec<f64> {
        match self {
            Scale::Nines => [0.5, 0.9, 0.99, 0.999, 0.9999]
                .iter()
                .map(|&q| self.forward(q))
                .collect(),
            Scale::Log => log_ticks(lo, hi),
            Scale::Linear => linear_ticks(lo, hi, 6),
        }
    }
}

/// 1-2-5 steps per decade, thinned to whole decades when the range is wide.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mantissas: &[f64] = if hi - lo > 4.0 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut out = Vec::new();
    let mut decade = lo.floor() as i32;
    while f64::from(decade) <= hi.ceil() {
        for m in mantissas {
            let t = (m * 10f64.powi(decade)).log10();
            if t >= lo - 1e-9 && t <= hi + 1e-9 {
                out.push(t);
            }
        }
        decade += 1;
    }
    out
}

/// About `target` ticks at a 1, 2 or 5 times a power of ten step.
fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let span = hi - lo;
    if span.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !span.is_finite() {
        return vec![lo];
    }
    let raw = span / target as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 {
        // Snap -0.0 and float noise so labels read "0", "0.3".
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

impl Unit {
    /// The label of a tick at data value `v`.
    pub fn label(self, v: f64) -> String {
        match self {
            Unit::Micros => format_micros(v),
            Unit::Number => format_number(v),
            Unit::Quantile => format_quantile(v),
        }
    }
}

/// "50%", "99.9%", "99.99%": as many decimals as the quantile needs.
pub fn format_quantile(q: f64) -> String {
    let pct = q * 100.0;
    for decimals in 0..6 {
        let text = format!("{pct:.decimals$}");
        if (text.parse::<f64>().unwrap_or(f64::NAN) - pct).abs() < 1e-6 {
            return format!("{text}%");
        }
    }
    format!("{pct}%")
}

/// Microseconds with the unit that keeps the label short: 0.5 µs, 250 µs,
/// 2.5 ms, 1.2 s.
pub fn format_micros(us: f64) -> String {
    scaled(us, [" µs", " ms", " s"])
}

/// 950, 1.5k, 20k, 1.2M.
pub fn format_number(v: f64) -> String {
    scaled(v, ["", "k", "M"])
}

/// `v` in units, thousands or millions of its unit, whichever keeps it
/// under a thousand, with that unit's suffix.
fn scaled(v: f64, [ones, thousands, millions]: [&str; 3]) -> String {
    let (value, suffix) = if v.abs() >= 1e6 {
        (v / 1e6, millions)
    } else if v.abs() >= 1e3 {
        (v / 1e3, thousands)
    } else {
        (v, ones)
    };
    format!("{}{suffix}", trim_number(value))
}

/// Up to three significant digits, no trailing zeros.
fn trim_number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let digits = v.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 6) as usize;
    without_trailing_zeros(format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn nines_axis_spaces_each_nine_equally() {
        let s = Scale::Nines;
        assert!(close(s.forward(0.9), 1.0));
        assert!(close(s.forward(0.99), 2.0));
        assert!(close(s.forward(0.9999), 4.0));
        assert!(close(s.inverse(s.forward(0.999)), 0.999));
        let labels: Vec<String> = s
            .ticks(0.0, 4.0)
            .into_iter()
            .map(|t| Unit::Quantile.label(s.inverse(t)))
            .collect();
        assert_eq!(labels, ["50%", "90%", "99%", "99.9%", "99.99%"]);
        // The whole axis is 50% .. 99.99% whatever the data.
        let (lo, hi) = s.range(0.1, 1.0, false);
        assert!(close(lo, 2f64.log10()) && close(hi, 4.0));
    }

    #[test]
    fn log_axis_ticks_are_1_2_5_per_decade_and_zero_sits_on_the_floor() {
        let s = Scale::Log;
        let (lo, hi) = s.range(150.0, 4_000.0, false);
        assert!(lo < 150f64.log10() && hi > 4_000f64.log10());
        let values: Vec<f64> = s
            .ticks(lo, hi)
            .into_iter()
            .map(|t| s.inverse(t).round())
            .collect();
        assert_eq!(values, [200.0, 500.0, 1_000.0, 2_000.0, 5_000.0]);
        assert!(s.forward(0.0).is_finite());
        // A flat series still gets a decade of room.
        let (lo, hi) = s.range(100.0, 100.0, false);
        assert!(hi - lo >= 1.0);
    }

    #[test]
    fn linear_ticks_use_round_steps() {
        assert_eq!(linear_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            linear_ticks(0.0, 5_250.0, 6),
            [0.0, 1_000.0, 2_000.0, 3_000.0, 4_000.0, 5_000.0]
        );
        assert_eq!(linear_ticks(3.0, 3.0, 6), [3.0]);
        let (lo, hi) = Scale::Linear.range(200.0, 1_000.0, true);
        assert_eq!(lo, 0.0);
        assert!(hi > 1_000.0);
    }

    #[test]
    fn labels_carry_readable_units() {
        assert_eq!(format_micros(250.0), "250 µs");
        assert_eq!(format_micros(2_500.0), "2.5 ms");
        assert_eq!(format_micros(1_000_000.0), "1 s");
        assert_eq!(format_micros(0.08), "0.08 µs");
        assert_eq!(format_number(950.0), "950");
        assert_eq!(format_number(2_000.0), "2k");
        assert_eq!(format_number(1_500.0), "1.5k");
        assert_eq!(format_number(50_000.0), "50k");
        assert_eq!(format_number(1_200_000.0), "1.2M");
        assert_eq!(format_quantile(0.5), "50%");
        assert_eq!(format_quantile(0.9999), "99.99%");
    }
}
