//! A scenario table's own keys, read one by one: each key is declared
//! where it is read (its default, its bounds, its unit, what a missing one
//! should look like), every problem names its key path, and a key nobody
//! read is refused at the end with the list of every key the table takes.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::problems::{Problems, read_at};
use crate::units::Dur;

/// The keys of one table not yet read, and what was read of it.
pub struct Keys {
    path: String,
    table: toml::Table,
    /// Every key the table takes, shared ones first, in the order read.
    accepted: Vec<String>,
    problems: Problems,
}

impl Keys {
    /// The keys of `table` at `path` (`scenario[2]`), besides the shared
    /// ones already taken out of it (`shared`, listed when one is unknown).
    pub fn new(path: &str, table: toml::Table, shared: &[&str]) -> Keys {
        Keys {
            path: path.to_string(),
            table,
            accepted: shared.iter().map(|k| k.to_string()).collect(),
            problems: Problems::default(),
        }
    }

    /// `key`'s full path, for a problem worded by the caller.
    pub fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    pub fn given(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    pub fn problem(&mut self, key: &str, message: impl Into<String>) {
        let path = self.path(key);
        self.problems.push(path, message);
    }

    /// `key`'s value as serde reads it; `None` when absent, and when
    /// malformed (then a problem naming the path into the value).
    pub fn get<T: DeserializeOwned>(&mut self, key: &str) -> Option<T> {
        if !self.accepted.iter().any(|k| k == key) {
            self.accepted.push(key.to_string());
        }
        let value = self.table.remove(key)?;
        read_at(value, &self.path(key), &mut self.problems)
    }

    /// `key`'s value, `default` when absent.
    pub fn or<T: DeserializeOwned>(&mut self, key: &str, default: T) -> T {
        self.get(key).unwrap_or(default)
    }

    /// A number, `default` when absent, within `range` (`unit` names it
    /// in the problem: " msg/s").
    pub fn within<T>(&mut self, key: &str, default: T, range: RangeInclusive<T>, unit: &str) -> T
    where
        T: DeserializeOwned + PartialOrd + Display + Copy,
    {
        let value = self.or(key, default);
        self.bound(key, value, range, unit);
        value
    }

    /// A number the table must give, within `range`; `missing` says what
    /// it is and gives an example. The range's start stands in for one
    /// missing or malformed.
    pub fn required<T>(
        &mut self,
        key: &str,
        range: RangeInclusive<T>,
        unit: &str,
        missing: &str,
    ) -> T
    where
        T: DeserializeOwned + PartialOrd + Display + Copy,
    {
        let given = self.given(key);
        match self.get(key) {
            Some(value) => {
                self.bound(key, value, range, unit);
                value
            }
            None => {
                if !given {
                    self.problem(key, format!("missing; {missing}"));
                }
                *range.start()
            }
        }
    }

    /// A duration, `default` when absent, within `range`.
    pub fn duration(
        &mut self,
        key: &str,
        default: Duration,
        range: RangeInclusive<Duration>,
    ) -> Duration {
        let value = self.get::<Dur>(key).map_or(default, |d| d.0);
        let (min, max) = (range.start().as_secs_f64(), range.end().as_secs_f64());
        self.bound(key, value.as_secs_f64(), min..=max, " seconds");
        value
    }

    /// One value or a list (`default` when absent), at least one entry and
    /// none twice, each within `range`.
    pub fn list<T>(
        &mut self,
        key: &str,
        default: Vec<T>,
        range: RangeInclusive<T>,
        unit: &str,
    ) -> Vec<T>
    where
        T: DeserializeOwned + PartialOrd + Display + Copy,
    {
        let values = self.choices(key, default);
        for (i, &v) in values.iter().enumerate() {
            let path = format!("{}[{i}]", self.path(key));
            self.problems
                .range(&path, v, *range.start(), *range.end(), unit);
        }
        values
    }

    /// One value or a list of named choices (`default` when absent), none
    /// twice: each runs as a variant of its own. At least one, unless the
    /// default is none (`reference = []` says what leaving it out says).
    pub fn choices<T: DeserializeOwned + PartialEq>(
        &mut self,
        key: &str,
        default: Vec<T>,
    ) -> Vec<T> {
        let (given, optional) = (self.given(key), default.is_empty());
        let values = self.get::<OneOrMany<T>>(key).map_or(default, |l| l.0);
        if given && values.is_empty() && !optional {
            self.problem(key, "needs at least one entry");
        }
        if has_repeats(&values) {
            self.problem(key, "lists a value twice");
        }
        values
    }

    /// Checks `min <= value <= max` for a value read another way.
    pub fn bound<T: PartialOrd + Display + Copy>(
        &mut self,
        key: &str,
        value: T,
        range: RangeInclusive<T>,
        unit: &str,
    ) {
        let path = self.path(key);
        self.problems
            .range(&path, value, *range.start(), *range.end(), unit);
    }

    /// Joins these problems to the profile's, with one for every key no
    /// reader took, naming every key the table takes.
    pub fn finish(mut self, problems: &mut Problems) {
        let expected: Vec<String> = self.accepted.iter().map(|k| format!("`{k}`")).collect();
        let unknown: Vec<String> = self.table.keys().cloned().collect();
        for key in unknown {
            self.problem(
                &key,
                format!(
                    "unknown field `{key}`, expected one of {}",
                    expected.join(", ")
                ),
            );
        }
        problems.extend(self.problems);
    }
}

/// A key that takes one value or a list of them (`msg_id = "none"` or
/// `msg_id = ["none", "unique"]`).
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read through a Value rather than an untagged enum, whose errors
        // say only that nothing matched; this keeps the element's message.
        let value = toml::Value::deserialize(d)?;
        let result = match value {
            toml::Value::Array(items) => items
                .into_iter()
                .map(T::deserialize)
                .collect::<Result<Vec<T>, _>>(),
            one => T::deserialize(one).map(|t| vec![t]),
        };
        result.map(OneOrMany).map_err(serde::de::Error::custom)
    }
}

/// The values of an optional list key, none when it is absent.
pub(super) fn items<T>(list: &Option<OneOrMany<T>>) -> &[T] {
    list.as_ref().map_or(&[], |l| l.0.as_slice())
}

/// `key[i]` for an element of a list, `key` for a single value.
pub(super) fn indexed(key: String, i: usize, len: usize) -> String {
    if len > 1 { format!("{key}[{i}]") } else { key }
}

/// Checks every element of a list within `min..=max`, each named as
/// [`indexed`] names it.
pub(super) fn range_each<T: PartialOrd + Display + Copy>(
    problems: &mut Problems,
    key: String,
    values: &[T],
    (min, max): (T, T),
    unit: &str,
) {
    for (i, &v) in values.iter().enumerate() {
        problems.range(&indexed(key.clone(), i, values.len()), v, min, max, unit);
    }
}

/// Every combination of one value from each of lists `lens` long, as
/// their indices, the last list innermost; an empty list takes part as
/// one absent value (index 0, past its end).
pub(super) fn picks(lens: &[usize]) -> Vec<Vec<usize>> {
    let total: usize = lens.iter().map(|&n| n.max(1)).product();
    let pick = |mut c: usize| {
        let mut at = vec![0; lens.len()];
        for (i, &n) in lens.iter().enumerate().rev() {
            (at[i], c) = (c % n.max(1), c / n.max(1));
        }
        at
    };
    (0..total).map(pick).collect()
}

/// Whether a list names one value twice (a rate, a policy): a variant
/// would run twice under one name.
pub fn has_repeats<T: PartialEq>(items: &[T]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].contains(a))
}

pub const NAME_RULE: &str =
    "must be 1-32 characters of letters, digits, '-' and '_' (it names streams and files)";

pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Keys {
        Keys::new("scenario[0]", text.parse().unwrap(), &["rate"])
    }

    fn messages(k: Keys) -> Vec<String> {
        let mut problems = Problems::default();
        k.finish(&mut problems);
        problems
            .list
            .into_iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn a_key_is_read_with_its_default_and_bounds() {
        let mut k = keys("messages = 0\npoll = \"20ms\"\n");
        assert_eq!(k.within("messages", 5u64, 1..=10, " messages"), 0);
        assert_eq!(k.within("rare_every", 7u64, 2..=10, ""), 7);
        let poll = k.duration(
            "poll",
            Duration::ZERO,
            Duration::from_millis(5)..=Duration::from_secs(1),
        );
        assert_eq!(poll, Duration::from_millis(20));
        let all = messages(k);
        assert_eq!(
            all,
            ["scenario[0].messages: 0 is out of range; allowed 1..=10 messages"]
        );
    }

    #[test]
    fn a_missing_a_malformed_and_an_unknown_key_each_say_so() {
        let mut k = keys("size = \"big\"\nrats = 3\n");
        assert_eq!(
            k.required("messages", 1u64..=10, "", "e.g. messages = 5"),
            1
        );
        assert_eq!(k.required("size", 1u64..=10, "", "e.g. size = 5"), 1);
        let all = messages(k);
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(all[0], "scenario[0].messages: missing; e.g. messages = 5");
        assert!(
            all[1].starts_with("scenario[0].size: invalid type"),
            "{all:?}"
        );
        assert_eq!(
            all[2],
            "scenario[0].rats: unknown field `rats`, expected one of `rate`, `messages`, `size`"
        );
    }

    #[test]
    fn a_list_names_its_element_and_refuses_repeats_and_nothing() {
        let mut k = keys("subjects = [0, 10, 10]\nfilters = []\n");
        assert_eq!(k.list("subjects", vec![1u32], 1..=100, ""), [0, 10, 10]);
        assert!(
            k.choices::<String>("filters", vec!["none".into()])
                .is_empty()
        );
        assert_eq!(k.list("max", vec![3u64], 0..=9, ""), [3]);
        let all = messages(k);
        assert_eq!(
            all,
            [
                "scenario[0].subjects: lists a value twice",
                "scenario[0].subjects[0]: 0 is out of range; allowed 1..=100",
                "scenario[0].filters: needs at least one entry",
            ]
        );
    }

    /// A list whose default is none takes an empty list as that default
    /// (ack's and publish's `reference = []`), as the profiles before the
    /// keys were declared once did.
    #[test]
    fn an_optional_list_may_be_given_empty() {
        let mut k = keys(
            "reference = []
filters = []
",
        );
        assert!(k.choices::<String>("reference", Vec::new()).is_empty());
        assert!(k.choices::<String>("filters", vec!["a".into()]).is_empty());
        assert_eq!(
            messages(k),
            ["scenario[0].filters: needs at least one entry"]
        );
    }
}
