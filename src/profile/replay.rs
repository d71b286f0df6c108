//! How a replay starts and is paced: the words the replay scenario's plan
//! and the replay readers share.

use serde::{Deserialize, Serialize};

/// MaxAckPending of a replay's durable: far above what one client keeps
/// in flight, so acks never throttle a catch-up.
pub const REPLAY_MAX_ACK_PENDING: i64 = 10_000;

/// Where a fresh replay consumer starts (the server's DeliverPolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayDeliver {
    All,
    ByStartSequence,
    ByStartTime,
    Last,
    /// Each subject's last message; the server insists on a filter subject.
    LastPerSubject,
    /// Only messages stored after the consumer is created.
    New,
}

impl ReplayDeliver {
    pub fn label(&self) -> &'static str {
        match self {
            ReplayDeliver::All => "all",
            ReplayDeliver::ByStartSequence => "by_start_sequence",
            ReplayDeliver::ByStartTime => "by_start_time",
            ReplayDeliver::Last => "last",
            ReplayDeliver::LastPerSubject => "last_per_subject",
            ReplayDeliver::New => "new",
        }
    }
}

/// How a replay is paced (the server's ReplayPolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayPace {
    /// As fast as the consumer takes them.
    Instant,
    /// Spaced as the messages were originally stored.
    Original,
}

impl ReplayPace {
    pub fn label(&self) -> &'static str {
        match self {
            ReplayPace::Instant => "instant",
            ReplayPace::Original => "original",
        }
    }
}

/// The consumer a replay reads through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayReader {
    /// An ordered push consumer: ephemeral, flow-controlled, no acks; what
    /// a client rebuilding a projection uses.
    Ordered,
    /// A durable pull consumer read continuously, every message acked.
    Pull,
}

impl ReplayReader {
    pub fn label(&self) -> &'static str {
        match self {
            ReplayReader::Ordered => "ordered",
            ReplayReader::Pull => "pull",
        }
    }
}
