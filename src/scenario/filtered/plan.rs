//! `kind = "filtered"`: keys and checks.

use serde::{Deserialize, Serialize};

use crate::profile::shared::{Offer, take};
use crate::profile::{CommonPlan, ConsumerPlan, Problems, Section};

/// The shape of a variant's filter over the fill's subjects
/// (`<base>.d.<k>` and the rare `<base>.rare`, [`super::layout::Layout`]).
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
    /// As the profile spells it, in declaration order.
    pub fn label(self) -> &'static str {
        ["none", "literal", "star", "tail", "all", "several"][self as usize]
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

/// Counted, not timed: each stream is filled with `messages` once.
const OFFER: Offer = Offer::TIMING
    .less(&["duration", "warmup"])
    .and(&["consumer", "message_size"]);

/// How long a variant may take to consume what it selects, by default.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Subject cardinalities the sweep may name: 7852's high-cardinality case
/// is 100,000; each subject costs the server its per-subject state.
const MAX_SUBJECTS: u32 = 1_000_000;

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let stream_limit = section.stream.and_then(|s| s.limits.max_msgs_per_subject);
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let common = shared.counted("filtered", DRAIN_TIMEOUT, problems);
    let plan = Plan {
        messages: k.required(
            "messages",
            1..=100_000_000,
            " messages",
            "how many messages each stream is filled with, e.g. messages = 200000",
        ),
        message_size: shared.fixed_size("filtered", problems),
        subjects: k.list("subjects", vec![1, 1000], 1..=MAX_SUBJECTS, ""),
        max_per_subject: k.list(
            "max_per_subject",
            vec![0],
            0..=1_000_000_000,
            " (0: no limit)",
        ),
        filters: k.choices("filters", Shape::ALL.to_vec()),
        rare_every: k.within("rare_every", 1000, 2..=100_000_000, " messages"),
        consumer: shared.consumer(true, problems),
    };
    // The scenario owns the durable's filter and the stream's per-subject
    // limit: a profile that sets either too is refused, never overridden.
    let (c, filters, max) = (&plan.consumer, k.path("filters"), k.path("max_per_subject"));
    if let Some(filter) = &c.filter {
        k.problem(
            "consumer.filter_subject",
            format!(
                "is {filter:?}, but the filtered scenario sets each durable's filter from \
                 {filters}; drop it"
            ),
        );
    }
    if !c.backoff.is_empty() || c.max_deliver != -1 {
        k.problem(
            "consumer",
            "the filtered scenario does not redeliver: drop backoff and max_deliver",
        );
    }
    if let Some(m) = stream_limit {
        k.problem(
            "stream.max_msgs_per_subject",
            format!(
                "is {m}, but the filtered scenario sets each stream's max_msgs_per_subject \
                 from {max} (0: none); set it there and drop this one"
            ),
        );
    }
    k.finish(problems);
    Some((common, plan))
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
    fn every_shape_is_labelled_as_the_profile_spells_it() {
        for shape in Shape::ALL {
            assert_eq!(serde_json::to_value(shape).unwrap(), shape.label());
        }
    }

    #[test]
    fn defaults_sweep_every_shape_over_two_cardinalities() {
        let p = plan("messages = 1000").unwrap();
        assert_eq!(p.subjects, [1, 1000]);
        assert_eq!(p.max_per_subject, [0]);
        assert_eq!(p.filters, Shape::ALL);
        assert_eq!(p.rare_every, 1000);
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
        let e = plan(
            "messages = 10\nmessage_size = { distribution = \"uniform\", min = 64, max = 128 }",
        )
        .unwrap_err();
        assert!(
            e.contains("message_size") && e.contains("one fixed size"),
            "{e}"
        );
        let e = plan("messages = 10\nrats = 3").unwrap_err();
        assert!(
            e.contains("unknown field `rats`") && e.contains("`rare_every`"),
            "{e}"
        );
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
