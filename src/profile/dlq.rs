//! The dead-letter pipeline's words: which advisories it captures, how
//! its handler reads and where a copy says it came from. The dlq
//! scenario's plan and the dlq engine share them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which advisories the DLQ's advisory stream captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capture {
    /// The delivery article's `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>`: every
    /// stream's advisories in the account; the handler skips the others.
    Account,
    /// Only the advisories of the consumers jsbench dead-letters: leaves
    /// the account-wide subject free for a capture stream of someone else's.
    Stream,
}

/// How the handler reads an original by sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OriginalGet {
    /// `STREAM.MSG.GET`, answered by the stream leader.
    Raw,
    /// `DIRECT.GET` (the stream allows direct gets), answered by any replica.
    Direct,
}

/// The dead-letter handler: a durable consumer of the advisory stream.
#[derive(Debug, Clone)]
pub struct DlqHandlerPlan {
    /// The handler durable's AckWait: how long before an advisory a
    /// handler took and never answered (it was killed) comes back.
    pub ack_wait: Duration,
    /// The nak delay when the original cannot be read or the copy not stored.
    pub retry_delay: Duration,
    /// Advisories worked on at once.
    pub concurrency: usize,
    pub get: OriginalGet,
    /// Delete work-queue originals with a secure erase (overwrite the
    /// stored bytes) rather than a plain remove.
    pub erase: bool,
    /// Kill the handler after this many copies (persisted, not yet
    /// acknowledged) and start a new one; `None` never.
    pub restart_after: Option<u64>,
    /// The names of the headers that say where a copy came from.
    pub origin_headers: OriginHeaders,
    /// From the pipeline's start until the handler first reads: a handler
    /// behind, whose originals a stream limit may evict meanwhile.
    pub start_after: Duration,
}

/// The headers a dead-letter copy carries about its original. The delivery article's
/// pattern names the sequence `Nats-Dlq-Origin-Seq`; the rest follow it.
/// nats-server 2.15 stores `Nats-` headers it does not know as they are
/// (pinned in tests/server_behaviour.rs), so the default is the delivery article's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OriginHeaders {
    pub stream: String,
    pub consumer: String,
    pub seq: String,
    /// The subject the original was published to: where a redrive sends
    /// it back.
    pub subject: String,
    /// `max_deliveries` or `terminated`: which advisory dead-lettered it.
    pub reason: String,
}

impl Default for OriginHeaders {
    fn default() -> Self {
        OriginHeaders {
            stream: "Nats-Dlq-Origin-Stream".into(),
            consumer: "Nats-Dlq-Origin-Consumer".into(),
            seq: "Nats-Dlq-Origin-Seq".into(),
            subject: "Nats-Dlq-Origin-Subject".into(),
            reason: "Nats-Dlq-Reason".into(),
        }
    }
}

impl OriginHeaders {
    /// Every name, in a fixed order.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.stream,
            &self.consumer,
            &self.seq,
            &self.subject,
            &self.reason,
        ]
    }
}

/// Publish-control headers: instructions to the stream a message is
/// published to, as nats-server 2.15 interprets them (a DLQ copy drops
/// them; an origin header may not be one). Matched without regard to case
/// (a proxy or a client may have changed it; the cost of dropping a look-alike user
/// header is smaller than that of a copy the DLQ stream refuses).
const CONTROL: &[&str] = &[
    "Nats-Msg-Id",
    "Nats-TTL",
    "Nats-Rollup",
    "Nats-Incr",
    "Nats-Schedule",
    "Nats-Required-Api-Level",
];

/// Families of publish-control headers.
const CONTROL_PREFIXES: &[&str] = &["Nats-Expected-", "Nats-Batch-", "Nats-Schedule-"];

/// Whether a header instructs the stream on publish and must not be copied.
pub fn is_publish_control(name: &str) -> bool {
    CONTROL.iter().any(|c| c.eq_ignore_ascii_case(name))
        || CONTROL_PREFIXES.iter().any(|p| {
            name.len() > p.len() && name.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
        })
}
