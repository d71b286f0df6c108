//! The DLQ stream read back after a run and checked against the originals:
//! every expected message has exactly one copy, on its consumer's subject,
//! with the original's payload and headers (publish control dropped) and
//! the origin headers; nothing else is there.
//!
//! The expected headers are rebuilt here from the original on their own,
//! not with the handler's [`super::copy::dead_letter_headers`], so a handler
//! that drops or mangles a header cannot pass by agreeing with itself.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::StreamMessage};
use bytes::Bytes;

use super::copy::{OriginHeaders, is_publish_control, pairs};
use super::{Key, PipelineSpec};
use crate::consume::SeenMessage;
use crate::streams::advisory::Kind;
use crate::streams::readback::read_each;

/// One message of the DLQ stream as read back.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub dlq_seq: u64,
    pub subject: String,
    pub headers: HeaderMap,
    pub payload: Bytes,
}

/// The DLQ stream, read in full.
#[derive(Debug, Clone, Default)]
pub struct DlqContents {
    pub letters: Vec<DeadLetter>,
    /// Whether the whole stream was read before the idle timeout.
    pub complete: bool,
}

/// Reads every message of the DLQ stream with an ordered consumer.
pub async fn read(js: &jetstream::Context, stream: &str, idle: Duration) -> Result<DlqContents> {
    let (letters, complete) = read_each(js, stream, idle, |next| {
        Some(DeadLetter {
            dlq_seq: next.info().map_or(0, |i| i.stream_sequence),
            subject: next.subject.to_string(),
            headers: next.headers.clone().unwrap_or_default(),
            payload: next.payload.clone(),
        })
    })
    .await?;
    Ok(DlqContents { letters, complete })
}

/// Reads the originals of `seqs` from their stream now (limits and
/// interest streams keep them); `None` for one that is not there.
pub async fn originals(
    js: &jetstream::Context,
    stream: &str,
    seqs: impl IntoIterator<Item = u64>,
) -> Result<BTreeMap<u64, Option<StreamMessage>>> {
    let handle = js
        .get_stream_no_info(stream)
        .await
        .with_context(|| format!("opening stream {stream}"))?;
    let mut out = BTreeMap::new();
    for seq in seqs {
        let m = match handle.get_raw_message(seq).await {
            Ok(m) => Some(m),
            Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => None,
            Err(e) => return Err(e).with_context(|| format!("getting {stream} sequence {seq}")),
        };
        out.insert(seq, m);
    }
    Ok(out)
}

/// What the read-back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    pub letters: u64,
    /// Expected messages with exactly one copy.
    pub once: u64,
    /// Expected messages without a copy.
    pub missing: Vec<u64>,
    /// Expected messages with more than one copy: (sequence, copies).
    pub repeated: Vec<(u64, u64)>,
    /// Copies of messages that were not to be dead-lettered, or that say
    /// nothing of where they came from: a few, described.
    pub unexpected: Vec<String>,
    pub unexpected_count: u64,
    /// Copies whose subject, payload or headers differ from what the
    /// original makes them: a few, described.
    pub mismatched: Vec<String>,
    pub mismatched_count: u64,
    /// Copies compared with their original.
    pub compared: u64,
}

const EXAMPLES: usize = 5;

impl Audit {
    fn unexpected(&mut self, what: String) {
        self.unexpected_count += 1;
        if self.unexpected.len() < EXAMPLES {
            self.unexpected.push(what);
        }
    }

    fn mismatch(&mut self, what: String) {
        self.mismatched_count += 1;
        if self.mismatched.len() < EXAMPLES {
            self.mismatched.push(what);
        }
    }
}

/// An original as the stream holds it now (limits and interest keep it),
/// in the shape of one as the consumer saw it at delivery: the record a
/// work queue's copy is held to, since its original is deleted once copied
/// and what the handler read of it is the handler's own word.
pub fn stored(m: &StreamMessage) -> SeenMessage {
    SeenMessage {
        seq: m.sequence,
        subject: m.subject.to_string(),
        payload: m.payload.to_vec(),
        headers: pairs(&m.headers),
    }
}

/// Checks the copies against `expected` (which message, dead-lettered by
/// which advisory) and the `originals`, as the pipeline `spec` names them.
pub fn check(
    letters: &[DeadLetter],
    expected: &BTreeMap<Key, Kind>,
    originals: &BTreeMap<Key, SeenMessage>,
    spec: &PipelineSpec,
) -> Audit {
    let (prefix, names) = (&spec.dlq_prefix, &spec.handler.origin_headers);
    let mut a = Audit {
        letters: letters.len() as u64,
        ..Audit::default()
    };
    let mut copies: BTreeMap<Key, u64> = BTreeMap::new();
    for letter in letters {
        let header = |name: &str| letter.headers.get(name).map(|v| v.as_str().to_string());
        let origin = (
            header(&names.stream),
            header(&names.consumer),
            header(&names.seq).and_then(|s| s.parse::<u64>().ok()),
        );
        let (Some(stream), Some(consumer), Some(seq)) = origin else {
            a.unexpected(format!(
                "DLQ sequence {} on {} says nothing of its origin",
                letter.dlq_seq, letter.subject
            ));
            continue;
        };
        let Some(w) = spec
            .watched
            .iter()
            .position(|w| w.stream == stream && w.consumer == consumer)
        else {
            a.unexpected(format!(
                "DLQ sequence {}: a copy of {stream}/{seq} for consumer {consumer}, which is not watched",
                letter.dlq_seq
            ));
            continue;
        };
        let key = (w, seq);
        *copies.entry(key).or_default() += 1;
        let Some(kind) = expected.get(&key) else {
            a.unexpected(format!(
                "DLQ sequence {}: {stream}/{seq} was not to be dead-lettered",
                letter.dlq_seq
            ));
            continue;
        };
        let want_subject = format!("{prefix}.{stream}.{consumer}");
        if letter.subject != want_subject {
            a.mismatch(format!(
                "{stream}/{seq}: on subject {}, expected {want_subject}",
                letter.subject
            ));
            continue;
        }
        let Some(original) = originals.get(&key) else {
            a.mismatch(format!("{stream}/{seq}: no original to compare with"));
            continue;
        };
        a.compared += 1;
        if letter.payload != original.payload {
            a.mismatch(format!(
                "{stream}/{seq}: payload of {} bytes differs from the original's {}",
                letter.payload.len(),
                original.payload.len()
            ));
            continue;
        }
        let want = expected_headers(original, (&stream, &consumer, seq, *kind), names);
        let got = pairs(&letter.headers);
        if got != want {
            let extra: Vec<_> = got.iter().filter(|h| !want.contains(h)).collect();
            let lost: Vec<_> = want.iter().filter(|h| !got.contains(h)).collect();
            a.mismatch(format!(
                "{stream}/{seq}: headers differ; not expected {extra:?}, missing {lost:?}"
            ));
        }
    }
    for key in expected.keys() {
        match copies.get(key).copied().unwrap_or(0) {
            0 => a.missing.push(key.1),
            1 => a.once += 1,
            n => a.repeated.push((key.1, n)),
        }
    }
    a
}

/// The original's headers without publish control, plus the origin
/// headers and the dedup id, as sorted pairs.
fn expected_headers(
    original: &SeenMessage,
    (stream, consumer, seq, kind): (&str, &str, u64, Kind),
    names: &OriginHeaders,
) -> Vec<(String, String)> {
    let mut want: Vec<(String, String)> = original
        .headers
        .iter()
        .filter(|(name, _)| !is_publish_control(name))
        .filter(|(name, _)| !names.all().contains(&name.as_str()))
        .cloned()
        .collect();
    want.extend([
        (names.stream.clone(), stream.to_string()),
        (names.consumer.clone(), consumer.to_string()),
        (names.seq.clone(), seq.to_string()),
        (names.subject.clone(), original.subject.clone()),
        (names.reason.clone(), kind.name().to_string()),
        (
            "Nats-Msg-Id".to_string(),
            format!("{stream}.{consumer}.{seq}"),
        ),
    ]);
    want.sort();
    want
}

#[cfg(test)]
mod tests {
    use super::super::copy::{Origin, dead_letter_headers};
    use super::*;

    /// The audit with the tests' watched consumer, prefix and header names.
    fn audited(
        letters: &[DeadLetter],
        expected: &BTreeMap<Key, Kind>,
        originals: &BTreeMap<Key, SeenMessage>,
    ) -> Audit {
        let watched = vec![super::super::Watched {
            stream: "SRC".into(),
            consumer: "c".into(),
            delete_original: false,
        }];
        check(
            letters,
            expected,
            originals,
            &PipelineSpec::for_tests(watched, false),
        )
    }

    fn original(seq: u64) -> StreamMessage {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("p-{seq}").as_str());
        headers.insert("Order-Id", "o-1");
        StreamMessage {
            subject: "jsb.t.s.v.0".into(),
            sequence: seq,
            headers,
            payload: Bytes::from_static(b"payload"),
            time: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn letter(dlq_seq: u64, of: &StreamMessage, tweak: impl Fn(&mut HeaderMap)) -> DeadLetter {
        let origin = Origin {
            stream: "SRC",
            consumer: "c",
            seq: of.sequence,
            kind: Kind::MaxDeliveries,
        };
        let mut headers = dead_letter_headers(
            &of.headers,
            of.subject.as_str(),
            &origin,
            &OriginHeaders::default(),
        );
        tweak(&mut headers);
        DeadLetter {
            dlq_seq,
            subject: origin.subject("p.dlq"),
            headers,
            payload: of.payload.clone(),
        }
    }

    #[test]
    fn exactly_once_with_the_original_content_passes() {
        let (o3, o5) = (original(3), original(5));
        let originals = BTreeMap::from([((0, 3), stored(&o3)), ((0, 5), stored(&o5))]);
        let expected =
            BTreeMap::from([((0, 3), Kind::MaxDeliveries), ((0, 5), Kind::MaxDeliveries)]);
        let letters = [letter(1, &o3, |_| {}), letter(2, &o5, |_| {})];
        let a = audited(&letters, &expected, &originals);
        assert_eq!(a.once, 2);
        assert_eq!(a.compared, 2);
        assert_eq!(
            a,
            Audit {
                letters: 2,
                once: 2,
                compared: 2,
                ..Audit::default()
            }
        );
    }

    #[test]
    fn missing_repeated_unexpected_and_altered_copies_are_reported() {
        let (o3, o5, o7) = (original(3), original(5), original(7));
        let originals = BTreeMap::from([
            ((0, 3), stored(&o3)),
            ((0, 5), stored(&o5)),
            ((0, 7), stored(&o7)),
        ]);
        let expected = BTreeMap::from([
            ((0, 3), Kind::MaxDeliveries),
            ((0, 5), Kind::MaxDeliveries),
            ((0, 9), Kind::MaxDeliveries),
        ]);
        let letters = [
            letter(1, &o3, |_| {}),
            letter(2, &o3, |_| {}),
            // A header lost on the way, and the control header kept.
            letter(3, &o5, |h| {
                *h = {
                    let mut k = HeaderMap::new();
                    for (n, v) in h.iter() {
                        if n.to_string() != "Order-Id" {
                            for v in v {
                                k.append(n.clone(), v.clone());
                            }
                        }
                    }
                    k
                }
            }),
            // A healthy message.
            letter(4, &o7, |_| {}),
            DeadLetter {
                dlq_seq: 5,
                subject: "p.dlq.x".into(),
                headers: HeaderMap::new(),
                payload: Bytes::new(),
            },
        ];
        let a = audited(&letters, &expected, &originals);
        assert_eq!(a.missing, vec![9]);
        assert_eq!(a.repeated, vec![(3, 2)]);
        assert_eq!(a.unexpected_count, 2, "{:?}", a.unexpected);
        assert_eq!(a.mismatched_count, 1, "{:?}", a.mismatched);
        assert!(a.mismatched[0].contains("Order-Id"), "{:?}", a.mismatched);
        assert_eq!(a.once, 1, "seq 5 has one copy, mismatched or not");
    }

    #[test]
    fn a_copy_that_kept_the_original_dedup_id_is_a_mismatch() {
        let o3 = original(3);
        let originals = BTreeMap::from([((0, 3), stored(&o3))]);
        let expected = BTreeMap::from([((0, 3), Kind::MaxDeliveries)]);
        let letters = [letter(1, &o3, |h| h.insert("Nats-Msg-Id", "p-3"))];
        let a = audited(&letters, &expected, &originals);
        assert_eq!(a.mismatched_count, 1, "{a:?}");
        let payload = [DeadLetter {
            payload: Bytes::from_static(b"other"),
            ..letter(1, &o3, |_| {})
        }];
        let a = audited(&payload, &expected, &originals);
        assert!(a.mismatched[0].contains("payload"), "{a:?}");
    }

    #[test]
    fn a_work_queue_copy_is_held_to_what_the_consumer_saw_not_to_the_handlers_read() {
        // The handler read (and copied) a different payload from the one
        // the consumer was delivered: agreeing with itself, it would pass.
        let delivered = original(3);
        let mut read_by_handler = original(3);
        read_by_handler.payload = Bytes::from_static(b"something else");
        let seen = crate::consume::SeenMessage {
            subject: delivered.subject.to_string(),
            seq: 3,
            payload: delivered.payload.to_vec(),
            headers: pairs(&delivered.headers),
        };
        let expected = BTreeMap::from([((0, 3), Kind::MaxDeliveries)]);
        let letters = [letter(1, &read_by_handler, |_| {})];
        let against_handler = BTreeMap::from([((0, 3), stored(&read_by_handler))]);
        let a = audited(&letters, &expected, &against_handler);
        assert_eq!(a.mismatched_count, 0, "circular: it passes");
        let against_consumer = BTreeMap::from([((0, 3), seen)]);
        let a = audited(&letters, &expected, &against_consumer);
        assert_eq!(a.mismatched_count, 1, "{:?}", a.mismatched);
    }
}
