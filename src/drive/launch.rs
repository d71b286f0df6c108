//! What starts a consumer client of a variant, and the counters every
//! client of this process shares.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::{ConsumerSpec, PeerCounts};
use crate::consume::{self, ConsumerConfig, ConsumerProgress, ConsumerReport, Crash};

/// One counter slot per consumer client, and one more for a client that
/// replaces a crashed one, so the sums never lose a crashed client's count.
#[derive(Clone, Default)]
pub(super) struct ClientProgress(pub Vec<Arc<ConsumerProgress>>);

impl ClientProgress {
    pub fn received(&self) -> u64 {
        self.0
            .iter()
            .map(|p| p.received.load(Ordering::Relaxed))
            .sum()
    }

    pub fn finished(&self) -> u64 {
        self.0
            .iter()
            .map(|p| p.finished.load(Ordering::Relaxed))
            .sum()
    }

    /// Deliveries the clients hold unanswered.
    pub fn in_flight(&self) -> u64 {
        self.0
            .iter()
            .map(|p| {
                let received = p.received.load(Ordering::Relaxed);
                received.saturating_sub(p.answered.load(Ordering::Relaxed))
            })
            .sum()
    }

    /// This process's counts for the other processes.
    pub fn counts(&self, sent: u64, stored: u64) -> PeerCounts {
        PeerCounts {
            sent,
            received: self.received(),
            finished: self.finished(),
            stored,
            in_flight: self.in_flight(),
        }
    }
}

/// Everything needed to start a consumer client for a variant.
pub(super) struct Launcher {
    pub stream: String,
    /// What a core subscriber reads.
    pub subject: String,
    pub spec: ConsumerSpec,
    pub record_from_ns: u64,
    pub t0_ns: u64,
    pub expected: u64,
    pub js_api_prefix: String,
    pub stop: CancellationToken,
    /// For the direct client's own connections.
    pub settings: crate::connect::ConnectSettings,
    /// The variant faults a server: the direct client, which does not
    /// reconnect, stays out of it.
    pub server_fault: bool,
}

impl Launcher {
    pub fn spawn(
        &self,
        client: async_nats::Client,
        index: usize,
        progress: Arc<ConsumerProgress>,
        crash: Option<Crash>,
    ) -> tokio::task::JoinHandle<Result<ConsumerReport>> {
        let config = ConsumerConfig {
            index,
            stream: self.stream.clone(),
            durable: self.spec.durable.clone(),
            plan: self.spec.plan.clone(),
            behaviour: self.spec.behaviour.clone(),
            record_from_ns: self.record_from_ns,
            timeline_origin_ns: self.t0_ns,
            expected_messages: self.expected,
            log_events: self.spec.log_events,
            hops: self.spec.hops,
            js_api_prefix: self.js_api_prefix.clone(),
            crash,
            keep_doomed: self.spec.keep_doomed,
            outage: self.spec.outage.map(|o| {
                let start_ns = self.t0_ns + o.after.as_nanos() as u64;
                consume::Outage {
                    start_ns,
                    end_ns: start_ns + o.lasts.as_nanos() as u64,
                    answer: o.answer,
                }
            }),
            dedup: self.spec.dedup.clone(),
        };
        // The client moves into the task: when the task ends, its
        // connection closes, which is what a crash must do.
        if self.spec.core {
            return crate::system::runtimes::consume().spawn(consume::core::run(
                client,
                self.subject.clone(),
                config,
                progress,
                self.stop.clone(),
            ));
        }
        let hazards = consume::direct::Hazards {
            server_fault: self.server_fault,
            crash: self.spec.crash.is_some(),
        };
        match consume::direct::chosen(&config, &self.settings, hazards) {
            // Its async-nats connection closes here, unused.
            Ok(true) => crate::system::runtimes::consume().spawn(consume::direct::run(
                self.settings.clone(),
                config,
                progress,
                self.stop.clone(),
            )),
            Ok(false) => crate::system::runtimes::consume().spawn(consume::run(
                client,
                config,
                progress,
                self.stop.clone(),
            )),
            Err(e) => crate::system::runtimes::consume().spawn(async move { Err(e) }),
        }
    }
}
