//! What is wrong with a profile: every problem with its key path and
//! line, gathered so a user fixes them all in one go.

use std::fmt;

/// A profile that cannot be run, with every problem found in it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileError {
    /// The file (or bundled profile) the problems are in.
    pub source: String,
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Key path, e.g. `scenario[0].consumer.ack_wait`; empty for the whole file.
    pub path: String,
    /// Line in the file, when known.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "profile {} is invalid:", self.source)?;
        for p in &self.problems {
            write!(f, "\n  - ")?;
            match (p.path.is_empty(), p.line) {
                (false, Some(line)) => write!(f, "{} (line {line}): ", p.path)?,
                (false, None) => write!(f, "{}: ", p.path)?,
                (true, Some(line)) => write!(f, "line {line}: ")?,
                (true, None) => {}
            }
            write!(f, "{}", p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ProfileError {}

/// Collects problems while validating, so a user fixes them all in one go.
#[derive(Debug, Default)]
pub struct Problems {
    pub(super) list: Vec<Problem>,
}

impl Problems {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.list.push(Problem {
            path: path.into(),
            line: None,
            message: message.into(),
        });
    }

    /// Checks `min <= value <= max`, naming the allowed range otherwise.
    /// Asked as "is it inside" rather than "is it outside": NaN is neither
    /// below nor above anything, so it would pass the second.
    pub fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        path: &str,
        value: T,
        min: T,
        max: T,
        unit: &str,
    ) {
        let inside = min <= value && value <= max;
        if !inside {
            self.push(
                path,
                format!("{value} is out of range; allowed {min}..={max}{unit}"),
            );
        }
    }

    /// Checks a duration within `min..=max` seconds.
    pub fn seconds(&mut self, path: &str, value: std::time::Duration, min: f64, max: f64) {
        self.range(path, value.as_secs_f64(), min, max, " seconds");
    }

    /// Checks a fraction of `of` (messages, sends) within `0..=max`.
    pub fn fraction(&mut self, path: &str, value: f64, max: f64, of: &str) {
        self.range(path, value, 0.0, max, &format!(" (a fraction of {of})"));
    }

    pub fn extend(&mut self, other: Problems) {
        self.list.extend(other.list);
    }

    /// The problems found so far.
    pub fn list(&self) -> &[Problem] {
        &self.list
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// `value` (at `path`; a value or a whole table) as serde reads it;
/// `None` when malformed, then a problem naming the path into the value.
pub(super) fn read_at<T: serde::de::DeserializeOwned>(
    value: impl Into<toml::Value>,
    path: &str,
    problems: &mut Problems,
) -> Option<T> {
    serde_path_to_error::deserialize(value.into())
        .map_err(|e| problems.push(under(path, e.path()), e.inner().message().trim()))
        .ok()
}

/// `prefix`, extended by the path serde found a problem at inside it.
pub(super) fn under(prefix: &str, path: &serde_path_to_error::Path) -> String {
    match path_text(path) {
        inner if inner.is_empty() => prefix.to_string(),
        inner => format!("{prefix}.{inner}"),
    }
}

pub(super) fn path_text(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." { String::new() } else { text }
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The line a key path like `scenario[1].consumer.ack_wait` is written on:
/// the key's own line when it can be found, else its table's header line.
/// Serde reports values without positions once a table has been read, so
/// the line is recovered from the text.
pub(super) fn locate(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let is_header = |n: usize| lines[n].trim_start().starts_with('[');
    let next_header = |from: usize, to: usize| (from..to).find(|&n| is_header(n)).unwrap_or(to);
    let key_line = |from: usize, to: usize, key: &str| {
        (from..to).find(|&n| {
            !is_header(n)
                && lines[n]
                    .split_once('=')
                    .is_some_and(|(k, _)| k.trim().trim_matches('"') == key)
        })
    };
    let segments: Vec<(&str, Option<usize>)> = path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse().ok()),
            None => (s, None),
        })
        .collect();

    // The table being searched: its header line (none at the top level),
    // the lines of its own keys, and the lines its sub-tables may be in.
    let (mut header, mut body, region_end, mut table, keys) = match segments.first() {
        Some(("scenario", Some(i))) => {
            let starts: Vec<usize> = (0..lines.len())
                .filter(|&n| lines[n].trim() == "[[scenario]]")
                .collect();
            let h = *starts.get(*i)?;
            let region_end = starts.get(i + 1).copied().unwrap_or(lines.len());
            let body = (h + 1, next_header(h + 1, region_end));
            (
                Some(h),
                body,
                region_end,
                "scenario".to_string(),
                &segments[1..],
            )
        }
        _ => (
            None,
            (0, next_header(0, lines.len())),
            lines.len(),
            String::new(),
            &segments[..],
        ),
    };
    for (depth, (name, _)) in keys.iter().enumerate() {
        if let Some(n) = key_line(body.0, body.1, name) {
            return Some(n + 1);
        }
        if depth + 1 == keys.len() {
            break;
        }
        let wanted = if table.is_empty() {
            format!("[{name}]")
        } else {
            format!("[{table}.{name}]")
        };
        let from = header.map_or(0, |h| h + 1);
        let Some(h) = (from..region_end).find(|&n| lines[n].trim() == wanted) else {
            break;
        };
        header = Some(h);
        body = (h + 1, next_header(h + 1, region_end));
        table = wanted.trim_matches(|c| c == '[' || c == ']').to_string();
    }
    header.map(|h| h + 1)
}
