//! Faults a plan injects: a server killed or cut off, a client crashed
//! with work in hand.

use serde::{Deserialize, Serialize};

/// What the restart scenario does to its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL, and started again on its store after `down_for`.
    #[default]
    Kill,
    /// Every route to and from the node closed (and refused) for
    /// `down_for`: the node is cut off from the cluster, its clients not.
    Cut,
    /// Every route to and from the node held with nothing passing for
    /// `down_for`, then let go: a stalled network.
    Pause,
}

impl FaultKind {
    pub fn is_route(self) -> bool {
        self != FaultKind::Kill
    }
}

/// Where the work in a client's hands is when it crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashPoint {
    /// Deliveries the client has pulled but not started: handlers finish
    /// (and ack) what they hold, the rest goes down with the connection.
    BeforeProcessing,
    /// Handlers are stopped mid-work: nothing in hand is acked.
    DuringProcessing,
    /// Handlers finish their work but the client dies before acking it:
    /// that work will run twice (the restarts article's fourth case).
    AfterProcessing,
    /// Not a crash: a graceful stop. The client stops pulling, finishes
    /// and acks what its handlers hold and what it has already received,
    /// then closes its connection.
    Drain,
}

/// Which server a restart kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultNode {
    /// The server (node 0 of a cluster).
    Server,
    /// The node leading the variant's stream.
    Leader,
    /// A node holding a replica of the variant's stream that does not lead
    /// it: the quorum survives, no election is due.
    Follower,
}
