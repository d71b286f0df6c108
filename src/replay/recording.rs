//! The recorded stream as the server stored it, and which of its messages a
//! deliver policy selects.
//!
//! The recording is read back with an ordered consumer once the record
//! phase is over: per message its stream sequence, the server's timestamp
//! (ground truth for every pacing figure: the server replays by these
//! timestamps, not by jsbench's send times), its subject and jsbench's stamp.
//! [`select`] then states, independently of any consumer, exactly which
//! sequences a fresh consumer with a given deliver policy must replay.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::jetstream::{
    self,
    consumer::{DeliverPolicy, pull::OrderedConfig},
};

use crate::profile::ReplayDeliver;
use crate::record::stamp::Stamp;
use crate::streams::readback::{End, read_ordered};

/// One stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub seq: u64,
    /// The server's timestamp, ns since the Unix epoch.
    pub published_ns: u64,
    /// Index of the subject `<base>.<index>` it was published to.
    pub subject: u32,
    /// The stamp's origin (publisher and message number); `u64::MAX`
    /// without a stamp.
    pub origin: u64,
    /// The stamp's intended send time, ns on [`crate::record::clock`]; 0 without.
    pub intended_ns: u64,
}

/// A stamp's origin as one number: publisher (high 16 bits) and message
/// number, as the stamp itself packs them.
pub fn origin(stamp: &Stamp) -> u64 {
    (u64::from(stamp.publisher) << 48) | stamp.publisher_seq
}

/// Reads every message of `stream` from sequence `from` on, in sequence
/// order, stopping at the end of the stream or after `idle` without a
/// message.
pub async fn read(
    js: &jetstream::Context,
    stream: &str,
    from: u64,
    idle: Duration,
) -> Result<Vec<Recorded>> {
    let mut handle = js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening stream {stream} to read the recording"))?;
    let last = handle
        .info()
        .await
        .context("reading stream info")?
        .state
        .last_sequence;
    let expected = (last + 1).saturating_sub(from.max(1));
    let mut recording = Vec::with_capacity(expected as usize);
    if expected == 0 {
        return Ok(recording);
    }
    let consumer = handle
        .create_consumer(OrderedConfig {
            deliver_policy: if from > 1 {
                DeliverPolicy::ByStartSequence {
                    start_sequence: from,
                }
            } else {
                DeliverPolicy::All
            },
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating an ordered consumer on {stream}"))?;
    let reading = format!("reading the recording of {stream}");
    let end = read_ordered(consumer, idle, &reading, |next| {
        let info = next
            .info()
            .map_err(|e| anyhow!("a recorded message without metadata: {e}"))?;
        let stamp = Stamp::read(&next.payload);
        recording.push(Recorded {
            seq: info.stream_sequence,
            published_ns: info.published.unix_timestamp_nanos().max(0) as u64,
            subject: subject_index(next.subject.as_str()),
            origin: stamp.as_ref().map_or(u64::MAX, origin),
            intended_ns: stamp.map_or(0, |s| s.intended_ns),
        });
        Ok(())
    })
    .await?;
    if end == End::Idle {
        return Err(anyhow!(
            "reading the recording of {stream} stalled after {} of {expected} messages \
             ({idle:?} without a message)",
            recording.len()
        ));
    }
    Ok(recording)
}

/// The index of a subject `<base>.<index>`; `u32::MAX` for another shape.
fn subject_index(subject: &str) -> u32 {
    subject
        .rsplit('.')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Where the start-dependent deliver policies start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// `by_start_sequence`: the first sequence.
    pub sequence: u64,
    /// `by_start_time`: the first server timestamp, ns since the epoch.
    pub time_ns: u64,
}

/// The sequences a fresh consumer with `deliver` selects from `recording`
/// (in stream order), as the server defines them: `all` everything;
/// `by_start_sequence` from that sequence on; `by_start_time` from the
/// first message stamped at or after the time (inclusive, as pinned in
/// tests/replay.rs) on, whatever the later timestamps; `last` the last
/// message; `last_per_subject` each subject's last message; `new` nothing
/// that is already stored.
pub fn select(recording: &[Recorded], deliver: ReplayDeliver, start: Start) -> Vec<u64> {
    let seqs = |from: usize| recording[from..].iter().map(|r| r.seq).collect();
    match deliver {
        ReplayDeliver::All => seqs(0),
        ReplayDeliver::ByStartSequence => {
            seqs(recording.partition_point(|r| r.seq < start.sequence))
        }
        ReplayDeliver::ByStartTime => seqs(
            recording
                .iter()
                .position(|r| r.published_ns >= start.time_ns)
                .unwrap_or(recording.len()),
        ),
        ReplayDeliver::Last => recording.last().map(|r| r.seq).into_iter().collect(),
        ReplayDeliver::LastPerSubject => {
            let mut last: HashMap<u32, u64> = HashMap::new();
            for r in recording {
                last.insert(r.subject, r.seq);
            }
            let mut seqs: Vec<u64> = last.into_values().collect();
            seqs.sort_unstable();
            seqs
        }
        ReplayDeliver::New => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording() -> Vec<Recorded> {
        // Sequences 1..=8 over subjects 0, 1, 2 round-robin, 10 ms apart
        // except a clock that stood still between 4 and 5.
        let times = [0u64, 10, 20, 30, 30, 50, 60, 70];
        times
            .iter()
            .enumerate()
            .map(|(i, &t)| Recorded {
                seq: i as u64 + 1,
                published_ns: 1_000_000_000 + t * 1_000_000,
                subject: (i % 3) as u32,
                origin: i as u64,
                intended_ns: 0,
            })
            .collect()
    }

    fn pick(deliver: ReplayDeliver, sequence: u64, time_ms: u64) -> Vec<u64> {
        let start = Start {
            sequence,
            time_ns: 1_000_000_000 + time_ms * 1_000_000,
        };
        select(&recording(), deliver, start)
    }

    #[test]
    fn each_policy_selects_its_set() {
        assert_eq!(pick(ReplayDeliver::All, 0, 0), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(pick(ReplayDeliver::ByStartSequence, 6, 0), [6, 7, 8]);
        assert_eq!(
            pick(ReplayDeliver::ByStartSequence, 1, 0),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert!(pick(ReplayDeliver::ByStartSequence, 9, 0).is_empty());
        assert_eq!(pick(ReplayDeliver::Last, 0, 0), [8]);
        // Subjects 0: 1, 4, 7; 1: 2, 5, 8; 2: 3, 6.
        assert_eq!(pick(ReplayDeliver::LastPerSubject, 0, 0), [6, 7, 8]);
        assert!(pick(ReplayDeliver::New, 0, 0).is_empty());
    }

    #[test]
    fn by_start_time_is_inclusive_and_starts_at_the_first_match() {
        assert_eq!(pick(ReplayDeliver::ByStartTime, 0, 30), [4, 5, 6, 7, 8]);
        assert_eq!(pick(ReplayDeliver::ByStartTime, 0, 31), [6, 7, 8]);
        assert_eq!(pick(ReplayDeliver::ByStartTime, 0, 25), [4, 5, 6, 7, 8]);
        assert!(pick(ReplayDeliver::ByStartTime, 0, 71).is_empty());
        assert_eq!(pick(ReplayDeliver::ByStartTime, 0, 0).len(), 8);
    }

    #[test]
    fn an_empty_recording_selects_nothing() {
        for deliver in [
            ReplayDeliver::All,
            ReplayDeliver::Last,
            ReplayDeliver::LastPerSubject,
            ReplayDeliver::ByStartTime,
        ] {
            let start = Start {
                sequence: 1,
                time_ns: 0,
            };
            assert!(select(&[], deliver, start).is_empty());
        }
    }

    #[test]
    fn subjects_are_indexed_by_their_last_token() {
        assert_eq!(subject_index("jsb.abc.replay.rec.3"), 3);
        assert_eq!(subject_index("other"), u32::MAX);
    }
}
