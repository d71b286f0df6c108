//! `kind = "filtered"`: keys and checks.

use serde::{Deserialize, Serialize};

use crate::profile::common::{OneOrMany, SizeSpec, has_repeats};
use crate::profile::shared::{Offer, split};
use crate::profile::{CommonPlan, ConsumerPlan, Problems, Section};

/// The shape of a variant's filter over the fill's subjects
/// (`<base>.d.<k>` and the rare `<base>.rare`, [`crate::streams::filter::Layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// No filter: the reference every other shape's rate is set against.
    None,
    /// `<base>.rare`: one message in `rare_every`.
    Literal,
    /// `<base>.d.*`: every data subject, nearly every message.
    Star,
    /// `<base>.d.>`: the same set through a full wildcard.
    Tail,
    /// `<base>.>`, the stream's own subject: everything.
    All,
    /// `filter_subjects = [<base>.d.*, <base>.rare]`: everything, through
    /// a filter set of several entries.
    Several,
}

impl Shape {
    pub fn label(self) -> &'static str {
        match self {
            Shape::None => "none",
            Shape::Literal => "literal",
            Shape::Star => "star",
            Shape::Tail => "tail",
            Shape::All => "all",
            Shape::Several => "several",
        }
    }

    pub const ALL: [Shape; 6] = [
        Shape::None,
        Shape::Literal,
        Shape::Star,
        Shape::Tail,
        Shape::All,
        Shape::Several,
    ];
}

/// The `filtered` scenario: one filled stream per subject cardinality and
/// max-per-subject, read by a fresh durable per filter shape.
#[derive(Debug, Clone)]
pub struct Plan {
    pub messages: u64,
    pub message_size: usize,
    /// Data subject cardinalities, one stream each.
    pub subjects: Vec<u32>,
    /// The stream's max_msgs_per_subject, one stream each; 0: none.
    pub max_per_subject: Vec<u64>,
    pub filters: Vec<Shape>,
    /// The literal filter's subject gets one message in this many.
    pub rare_every: u64,
    /// The filter is set per variant.
    pub consumer: ConsumerPlan,
}

impl Plan {
    /// Streams filled: one per cardinality and max-per-subject.
    pub fn streams(&self) -> usize {
        self.subjects.len() * self.max_per_subject.len()
    }
}

/// Counted, not timed: each stream is filled with `messages` once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilteredSection {
    messages: Option<u64>,
    message_size: Option<SizeSpec>,
    subjects: Option<OneOrMany<u32>>,
    max_per_subject: Option<OneOrMany<u64>>,
    filters: Option<OneOrMany<Shape>>,
    rare_every: Option<u64>,
}

const OFFER: Offer = Offer::TIMING
    .less(&["duration", "warmup"])
    .and(&["consumer"]);

/// How long a variant may take to consume what it selects, by default.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Subject cardinalities the sweep may name: 7852's high-cardinality case
/// is 100,000; each subject costs the server its per-subject state.
const MAX_SUBJECTS: u32 = 1_000_000;

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let stream_limit = section.stream.and_then(|s| s.limits.max_msgs_per_subject);
    let (mut shared, s) = split::<FilteredSection>(table, OFFER, prefix, problems)?;
    let common = shared.counted("filtered", DRAIN_TIMEOUT, problems);
    let key = |k: &str| format!("{prefix}.{k}");
    let messages = s.messages.unwrap_or(0);
    match s.messages {
        None => problems.push(
            key("messages"),
            "missing; how many messages each stream is filled with, e.g. messages = 200000",
        ),
        Some(n) => problems.range(&key("messages"), n, 1, 100_000_000, " messages"),
    }
    let message_size = read_size(s.message_size, &key("message_size"), problems);
    let subjects = s.subjects.map(|l| l.0).unwrap_or_else(|| vec![1, 1000]);
    for (i, &c) in subjects.iter().enumerate() {
        problems.range(&format!("{}[{i}]", key("subjects")), c, 1, MAX_SUBJECTS, "");
    }
    let max_per_subject = s.max_per_subject.map(|l| l.0).unwrap_or_else(|| vec![0]);
    for (i, &m) in max_per_subject.iter().enumerate() {
        problems.range(
            &format!("{}[{i}]", key("max_per_subject")),
            m,
            0,
            1_000_000_000,
            " (0: no limit)",
        );
    }
    let filters = s
        .filters
        .map(|l| l.0)
        .unwrap_or_else(|| Shape::ALL.to_vec());
    for (k, list_empty, repeats) in [
        ("subjects", subjects.is_empty(), has_repeats(&subjects)),
        (
            "max_per_subject",
            max_per_subject.is_empty(),
            has_repeats(&max_per_subject),
        ),
        ("filters", filters.is_empty(), has_repeats(&filters)),
    ] {
        if list_empty {
            problems.push(key(k), "needs at least one entry");
        }
        if repeats {
            problems.push(key(k), "lists a value twice");
        }
    }
    let rare_every = s.rare_every.unwrap_or(1000);
    problems.range(&key("rare_every"), rare_every, 2, 100_000_000, " messages");
    let consumer = shared.consumer(true, problems);
    check_owned(&consumer, stream_limit, prefix, problems);
    let plan = Plan {
        messages,
        message_size,
        subjects,
        max_per_subject,
        filters,
        rare_every,
        consumer,
    };
    Some((common, plan))
}

fn read_size(size: Option<SizeSpec>, key: &str, problems: &mut Problems) -> usize {
    let size = match size.unwrap_or(SizeSpec::Fixed(128)) {
        SizeSpec::Fixed(n) => n,
        SizeSpec::Distribution(_) => {
            problems.push(key, "the filtered scenario uses one fixed size");
            128
        }
    };
    problems.range(
        key,
        size,
        crate::record::stamp::STAMP_LEN,
        crate::profile::common::MAX_MESSAGE_SIZE,
        " bytes",
    );
    size
}

/// The scenario owns the durable's filter and the stream's per-subject
/// limit: a profile that sets either too is refused, never overridden.
fn check_owned(c: &ConsumerPlan, stream_limit: Option<i64>, prefix: &str, problems: &mut Problems) {
    if let Some(filter) = &c.filter {
        problems.push(
            format!("{prefix}.consumer.filter_subject"),
            format!(
                "is {filter:?}, but the filtered scenario sets each durable's filter from \
                 {prefix}.filters; drop it"
            ),
        );
    }
    if !c.backoff.is_empty() || c.max_deliver != -1 {
        problems.push(
            format!("{prefix}.consumer"),
            "the filtered scenario does not redeliver: drop backoff and max_deliver",
        );
    }
    if let Some(m) = stream_limit {
        problems.push(
            format!("{prefix}.stream.max_msgs_per_subject"),
            format!(
                "is {m}, but the filtered scenario sets each stream's max_msgs_per_subject \
                 from {prefix}.max_per_subject (0: none); set it there and drop this one"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{KindPlan, parse};

    /// Counted, not timed: the kind takes no duration, so not
    /// `one_scenario`'s profile.
    fn plan(body: &str) -> Result<Plan, String> {
        let text = format!("name = \"t\"\n[[scenario]]\nkind = \"filtered\"\n{body}");
        parse("test", &text)
            .map(|mut p| match p.scenarios.remove(0).kind {
                KindPlan::Filtered(p) => p,
                other => panic!("{other:?}"),
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_sweep_every_shape_over_two_cardinalities() {
        let p = plan("messages = 1000").unwrap();
        assert_eq!(p.subjects, [1, 1000]);
        assert_eq!(p.max_per_subject, [0]);
        assert_eq!(p.filters, Shape::ALL);
        assert_eq!(p.rare_every, 1000);
        assert_eq!(p.streams(), 2);
    }

    #[test]
    fn bad_values_are_refused_naming_the_key_and_value() {
        let e = plan("messages = 1000\nsubjects = [0, 10]").unwrap_err();
        assert!(e.contains("subjects[0]"), "{e}");
        let e = plan("messages = 1000\nfilters = [\"none\", \"regex\"]").unwrap_err();
        assert!(e.contains("filters") && e.contains("regex"), "{e}");
        let e = plan("messages = 1000\nrare_every = 1").unwrap_err();
        assert!(e.contains("rare_every"), "{e}");
        let e = plan("subjects = [1]").unwrap_err();
        assert!(e.contains("messages"), "{e}");
        let e = plan("messages = 10\nfilters = [\"star\", \"star\"]").unwrap_err();
        assert!(e.contains("filters") && e.contains("twice"), "{e}");
    }

    #[test]
    fn a_stream_max_msgs_per_subject_is_refused_naming_both_keys() {
        let e = plan(
            "messages = 1000\nmax_per_subject = [3]\n[scenario.stream]\nmax_msgs_per_subject = 5\n",
        )
        .unwrap_err();
        assert!(e.contains("stream.max_msgs_per_subject"), "{e}");
        assert!(e.contains("max_per_subject (0: none)"), "{e}");
        assert!(e.contains("is 5"), "{e}");
    }

    #[test]
    fn a_consumer_filter_is_refused_not_overridden() {
        let e = plan("messages = 1000\n[scenario.consumer]\nfilter_subject = \"x\"\n").unwrap_err();
        assert!(
            e.contains("consumer.filter_subject") && e.contains("\"x\""),
            "{e}"
        );
    }
}
