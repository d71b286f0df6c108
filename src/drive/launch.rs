//! What starts a consumer client of a variant, and the counters every
//! client of this process shares.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::{ConsumerSpec, DriveSpec, PeerCounts};
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

/// Everything needed to start a consumer client of a variant, for each of
/// its durables.
pub(super) struct Launcher {
    readers: Vec<ReaderLaunch>,
    pub record_from_ns: u64,
    pub t0_ns: u64,
    pub js_api_prefix: String,
    pub stop: CancellationToken,
    /// For the direct client's own connections.
    pub settings: crate::connect::ConnectSettings,
    /// The variant faults a server: the direct client, which does not
    /// reconnect, stays out of it.
    pub server_fault: bool,
}

/// One durable's part of the launch.
struct ReaderLaunch {
    stream: String,
    /// What a core subscriber reads.
    subject: String,
    spec: ConsumerSpec,
    /// Messages its clients size their ledger for.
    expected: u64,
}

impl Launcher {
    /// The launcher of `spec`'s readers on `timing`, each client sizing
    /// its ledger for `expected` messages (its stream's share of them).
    pub fn new(
        ctx: &super::RunContext,
        spec: &DriveSpec,
        (t0_ns, record_from_ns): (u64, u64),
        expected: u64,
        stop: CancellationToken,
    ) -> Launcher {
        let streams = spec.streams.len().max(1) as u64;
        let readers = spec
            .readers
            .iter()
            .map(|r| {
                let stream = spec.streams.get(r.stream);
                ReaderLaunch {
                    stream: stream.map(|s| s.name.clone()).unwrap_or_default(),
                    subject: stream
                        .and_then(|s| s.subjects.first().cloned())
                        .unwrap_or_default(),
                    spec: r.consumer.clone(),
                    expected: expected.div_ceil(streams),
                }
            })
            .collect();
        Launcher {
            readers,
            record_from_ns,
            t0_ns,
            js_api_prefix: ctx.connect.js_api.prefix(),
            stop,
            settings: ctx.connect.clone(),
            server_fault: spec.fault.is_some(),
        }
    }

    /// The first durable's stream and name: the one a crash names.
    pub fn first(&self) -> (&str, &str) {
        self.readers
            .first()
            .map_or(("", ""), |r| (r.stream.as_str(), r.spec.durable.as_str()))
    }

    /// Client `index` of durable `reader`.
    pub fn config(&self, reader: usize, index: usize, crash: Option<Crash>) -> ConsumerConfig {
        let r = &self.readers[reader];
        ConsumerConfig {
            index,
            stream: r.stream.clone(),
            durable: r.spec.durable.clone(),
            plan: r.spec.plan.clone(),
            behaviour: r.spec.behaviour.clone(),
            record_from_ns: self.record_from_ns,
            timeline_origin_ns: self.t0_ns,
            expected_messages: r.expected,
            log_events: r.spec.log_events,
            hops: r.spec.hops,
            js_api_prefix: self.js_api_prefix.clone(),
            crash,
            keep_doomed: r.spec.keep_doomed,
            outage: r.spec.outage.map(|o| {
                let start_ns = self.t0_ns + o.after.as_nanos() as u64;
                consume::Outage {
                    start_ns,
                    end_ns: start_ns + o.lasts.as_nanos() as u64,
                    answer: o.answer,
                }
            }),
            dedup: r.spec.dedup.clone(),
        }
    }

    /// Starts client `index` of durable `reader` on `client`, or on the
    /// binding it already has.
    pub fn spawn(
        &self,
        client: async_nats::Client,
        (reader, index): (usize, usize),
        bound: Option<consume::Bound>,
        progress: Arc<ConsumerProgress>,
        crash: Option<Crash>,
    ) -> tokio::task::JoinHandle<Result<ConsumerReport>> {
        let spec = &self.readers[reader].spec;
        let config = self.config(reader, index, crash);
        let runtime = crate::system::runtimes::consume();
        let stop = self.stop.clone();
        // The client moves into the task: when the task ends, its
        // connection closes, which is what a crash must do.
        if let Some(bound) = bound {
            return runtime.spawn(consume::run_bound(client, bound, config, progress, stop));
        }
        if spec.core {
            let subject = self.readers[reader].subject.clone();
            return runtime.spawn(consume::core::run(client, subject, config, progress, stop));
        }
        let hazards = consume::direct::Hazards {
            server_fault: self.server_fault,
            crash: spec.crash.is_some(),
        };
        match consume::direct::chosen(&config, &self.settings, hazards) {
            // Its async-nats connection closes here, unused.
            Ok(true) => runtime.spawn(consume::direct::run(
                self.settings.clone(),
                config,
                progress,
                stop,
            )),
            Ok(false) => runtime.spawn(consume::run(client, config, progress, stop)),
            Err(e) => runtime.spawn(async move { Err(e) }),
        }
    }
}

impl DriveSpec {
    /// The durable client `index` (of the whole variant) reads: readers'
    /// clients are numbered one durable after the other.
    pub fn reader_of(&self, index: usize) -> usize {
        let mut first = 0;
        for (r, reader) in self.readers.iter().enumerate() {
            first += reader.consumer.plan.consumers;
            if index < first {
                return r;
            }
        }
        self.readers.len().saturating_sub(1)
    }
}
