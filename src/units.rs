//! Units as people write them, read and written back the same way in
//! profiles, flags and reports: durations ("500ms", "1m30s"),
//! percentages ("2.5%") and byte counts ("64MiB"). Every layer may use
//! them; none of them is about a profile.
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::system::error::UsageError;

/// A duration as people write it ("10s"), read and written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

pub const DURATION_HELP: &str =
    "a number followed by ns, us, ms, s, m or h, e.g. \"500ms\", \"10s\", \"1m30s\"";

/// Parses "10s", "250ms", "1m30s", "1.5s"; what does not read is bad
/// input, its message naming the form expected.
pub fn parse_duration(text: &str) -> Result<Duration, UsageError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(UsageError(format!(
            "empty duration; expected {DURATION_HELP}"
        )));
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| {
            UsageError(format!(
                "invalid duration {text:?}; expected {DURATION_HELP}"
            ))
        })?;
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(UsageError(format!(
                    "duration {text:?} has no unit; expected {DURATION_HELP}"
                )));
            }
            other => {
                return Err(UsageError(format!(
                    "unknown unit {other:?} in duration {text:?}; expected {DURATION_HELP}"
                )));
            }
        };
        total += value * scale;
        rest = tail;
    }
    if !total.is_finite() || total > 1e9 {
        return Err(UsageError(format!("duration {text:?} is out of range")));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration compactly, the inverse of [`parse_duration`] for the
/// values people write.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        let s = ns / 1_000_000_000;
        if s.is_multiple_of(3600) {
            format!("{}h", s / 3600)
        } else if s.is_multiple_of(60) {
            format!("{}m", s / 60)
        } else {
            format!("{s}s")
        }
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a duration string: {DURATION_HELP}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(self.0))
    }
}

/// A percentage: `10%`, `2.5%` or a bare `10`, 0..=1000%, as a fraction.
pub fn parse_percent(text: &str) -> Result<f64, UsageError> {
    let number = text.trim().trim_end_matches('%').trim();
    match number.parse::<f64>() {
        Ok(p) if p.is_finite() && (0.0..=1000.0).contains(&p) => Ok(p / 100.0),
        Ok(_) => Err(UsageError(format!(
            "{text:?} is out of range; allowed 0% to 1000%"
        ))),
        Err(_) => Err(UsageError(format!(
            "{text:?} is not a percentage; write it like 10% or 2.5%"
        ))),
    }
}

/// A byte count: an integer, or a string with a unit (`"512KiB"`,
/// `"64MB"`, `"1GiB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) if n >= 0 => Ok(Bytes(n as u64)),
            toml::Value::String(s) => parse_bytes(&s).map(Bytes).ok_or_else(|| {
                serde::de::Error::custom(format!("{s:?} is not a size; {BYTES_HELP}"))
            }),
            other => Err(serde::de::Error::custom(format!(
                "expected a size, found {other}; {BYTES_HELP}"
            ))),
        }
    }
}

const BYTES_HELP: &str = "a number of bytes, or a string with B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (of 1024), e.g. \"64MiB\"";

fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * scale;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("40us"), Ok(Duration::from_micros(40)));
    }

    #[test]
    fn rejects_with_the_expected_form() {
        for bad in ["10", "ten s", "5 parsecs", "", "1.2.3s"] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains("e.g."), "{bad:?}: {err}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for d in [
            Duration::from_secs(10),
            Duration::from_millis(250),
            Duration::from_secs(120),
            Duration::from_micros(40),
            Duration::ZERO,
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn sizes_read_with_either_unit() {
        assert_eq!(parse_bytes("512"), Some(512));
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes("1.5 KB"), Some(1500));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_bytes(""), None);
    }
}
