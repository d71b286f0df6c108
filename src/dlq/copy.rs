//! The dead-letter copy of an original: its payload as it is, its headers
//! without the ones that steer a publish, and headers that say where it
//! came from.
//!
//! Publish-control headers are instructions to the stream an original was
//! published to (deduplicate by this id, expect that last sequence, expire
//! after, roll up, count, batch, schedule). Copied onto the DLQ publish they
//! would be obeyed again by the DLQ stream: a dedup id that suppresses the
//! copy, an expectation that fails it, a TTL that expires it. The list
//! follows what nats-server 2.15 interprets on publish, and what the server
//! itself strips when it republishes a scheduled message.

use async_nats::HeaderMap;
use async_nats::header::{HeaderValue, NATS_MESSAGE_ID};

pub use crate::consume::header_pairs as pairs;
use crate::streams::advisory::Kind;

pub use crate::profile::{OriginHeaders, is_publish_control};

/// Headers a direct get adds to its answer about the stored message; they
/// were never the original's.
const DIRECT_GET: &[&str] = &[
    "Nats-Stream",
    "Nats-Sequence",
    "Nats-Time-Stamp",
    "Nats-Subject",
    "Nats-Last-Sequence",
    "Nats-Num-Pending",
    "Nats-UpTo-Sequence",
];

/// Removes what a direct get added, leaving the stored message's headers.
pub fn strip_direct_get(headers: &HeaderMap) -> HeaderMap {
    without(headers, |name| {
        DIRECT_GET.iter().any(|d| d.eq_ignore_ascii_case(name))
    })
}

/// `headers` but those whose name `drop` picks.
pub fn without(headers: &HeaderMap, drop: impl Fn(&str) -> bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, values) in headers.iter() {
        if !drop(name.as_ref()) {
            for v in values {
                out.append(name.clone(), v.clone());
            }
        }
    }
    out
}

/// Which message a copy stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    pub stream: &'a str,
    pub consumer: &'a str,
    pub seq: u64,
    pub kind: Kind,
}

impl Origin<'_> {
    /// `<stream>.<consumer>.<seq>`: the same for every attempt at one
    /// message, so the DLQ stream stores a redelivered advisory's copy once,
    /// and different for two consumers that dead-letter the same message.
    pub fn msg_id(&self) -> String {
        format!("{}.{}.{}", self.stream, self.consumer, self.seq)
    }

    /// `<prefix>.<stream>.<consumer>`: one subject per failing consumer, so
    /// its backlog can be read or replayed alone.
    pub fn subject(&self, prefix: &str) -> String {
        format!("{prefix}.{}.{}", self.stream, self.consumer)
    }
}

/// The copy's headers: the original's minus publish control, then where it
/// came from (under `names`) and the dedup id.
pub fn dead_letter_headers(
    original: &HeaderMap,
    subject: &str,
    origin: &Origin,
    names: &OriginHeaders,
) -> HeaderMap {
    let mut out = without(original, is_publish_control);
    out.insert(names.stream.as_str(), origin.stream);
    out.insert(names.consumer.as_str(), origin.consumer);
    out.insert(
        names.seq.as_str(),
        HeaderValue::from(origin.seq.to_string().as_str()),
    );
    out.insert(names.subject.as_str(), subject);
    out.insert(names.reason.as_str(), origin.kind.name());
    out.insert(NATS_MESSAGE_ID, HeaderValue::from(origin.msg_id().as_str()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin<'static> {
        Origin {
            stream: "SRC",
            consumer: "worker",
            seq: 42,
            kind: Kind::MaxDeliveries,
        }
    }

    #[test]
    fn publish_control_headers_are_recognised_in_any_case() {
        for name in [
            "Nats-Msg-Id",
            "nats-msg-id",
            "Nats-Expected-Stream",
            "Nats-Expected-Last-Sequence",
            "Nats-Expected-Last-Subject-Sequence",
            "Nats-Expected-Last-Subject-Sequence-Subject",
            "Nats-Expected-Last-Msg-Id",
            "NATS-TTL",
            "Nats-Rollup",
            "Nats-Incr",
            "Nats-Batch-Id",
            "Nats-Batch-Sequence",
            "Nats-Batch-Commit",
            "Nats-Schedule",
            "Nats-Schedule-TTL",
            "Nats-Schedule-Target",
            "Nats-Required-Api-Level",
        ] {
            assert!(is_publish_control(name), "{name}");
        }
        for name in [
            "Order-Id",
            "traceparent",
            "Nats-Msg-Id-Extra",
            "Nats-Expected-",
            "Nats-Counter-Sources",
            "Nats-Dlq-Origin-Seq",
            "X-Nats-Msg-Id",
        ] {
            assert!(!is_publish_control(name), "{name}");
        }
    }

    #[test]
    fn the_copy_keeps_every_other_header_and_says_where_it_came_from() {
        let mut original = HeaderMap::new();
        original.insert("Nats-Msg-Id", "p-0-17");
        original.insert("Nats-Expected-Last-Sequence", "16");
        original.insert("Nats-TTL", "1h");
        original.insert("Nats-Rollup", "sub");
        original.insert("Order-Id", "o-9");
        original.append("Tag", "a");
        original.append("Tag", "b");
        let copy =
            dead_letter_headers(&original, "orders.eu", &origin(), &OriginHeaders::default());
        assert_eq!(
            pairs(&copy),
            vec![
                ("Nats-Dlq-Origin-Consumer".into(), "worker".into()),
                ("Nats-Dlq-Origin-Seq".into(), "42".into()),
                ("Nats-Dlq-Origin-Stream".into(), "SRC".into()),
                ("Nats-Dlq-Origin-Subject".into(), "orders.eu".into()),
                ("Nats-Dlq-Reason".into(), "max_deliveries".into()),
                ("Nats-Msg-Id".into(), "SRC.worker.42".into()),
                ("Order-Id".into(), "o-9".into()),
                ("Tag".into(), "a".into()),
                ("Tag".into(), "b".into()),
            ]
        );
        assert_eq!(
            origin().subject("jsb.t.dlq.v.dlq"),
            "jsb.t.dlq.v.dlq.SRC.worker"
        );
    }

    #[test]
    fn an_original_that_was_a_dead_letter_itself_gets_new_origin_headers() {
        let mut original = HeaderMap::new();
        original.insert("Nats-Dlq-Origin-Seq", "7");
        let copy =
            dead_letter_headers(&original, "orders.eu", &origin(), &OriginHeaders::default());
        let seqs: Vec<&str> = copy
            .get_all("Nats-Dlq-Origin-Seq")
            .map(|v| v.as_str())
            .collect();
        assert_eq!(seqs, ["42"]);
    }

    #[test]
    fn the_origin_headers_take_the_names_a_profile_gives() {
        let names = OriginHeaders {
            seq: "X-Origin-Seq".into(),
            ..OriginHeaders::default()
        };
        let copy = dead_letter_headers(&HeaderMap::new(), "orders.eu", &origin(), &names);
        assert_eq!(copy.get("X-Origin-Seq").map(|v| v.as_str()), Some("42"));
        assert!(copy.get("Nats-Dlq-Origin-Seq").is_none());
        assert_eq!(
            copy.get("Nats-Dlq-Origin-Stream").map(|v| v.as_str()),
            Some("SRC")
        );
    }

    #[test]
    fn direct_get_metadata_is_not_part_of_the_original() {
        let mut answer = HeaderMap::new();
        for h in DIRECT_GET {
            answer.insert(*h, "x");
        }
        answer.insert("Order-Id", "o-9");
        assert_eq!(
            pairs(&strip_direct_get(&answer)),
            vec![("Order-Id".to_string(), "o-9".to_string())]
        );
    }
}
