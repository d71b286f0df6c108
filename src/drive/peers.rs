//! The other processes of a variant, as drive's phases see them.
//!
//! A variant split over workers must agree on when it starts, hear how far
//! the others are, know when they have all published, and merge their
//! parts at the end. Drive asks those questions through [`Peers`] at fixed
//! points of its phases; [`crate::worker`] answers them over NATS (the
//! coordinator leads, a worker follows), and [`Alone`] answers them for a
//! variant that runs in one process.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::spec::DriveSpec;
use crate::consume::ConsumerReport;
use crate::load::{AckReport, SendReport};
use crate::record::clock;
use crate::system::progress::VariantBar;

/// What one process of a variant reports to the others while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounts {
    pub sent: u64,
    pub received: u64,
    pub finished: u64,
    /// PubAcks that confirmed a stored message (new, late or retried).
    pub stored: u64,
    /// Deliveries the clients hold unanswered.
    pub in_flight: u64,
}

/// What the others said on a tick of the publish phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Their counts, summed.
    pub others: PeerCounts,
    /// Stop publishing: the run that leads this process was interrupted,
    /// or gave the variant up.
    pub halt: bool,
}

/// One publisher's reports, with its index in the whole variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublisherPart {
    pub index: usize,
    pub send: SendReport,
    pub ack: AckReport,
}

/// What another process ran of the variant: its task reports, exactly as
/// this process merges its own.
#[derive(Debug, Clone, Default)]
pub struct PeerPart {
    pub publishers: Vec<PublisherPart>,
    pub consumers: Vec<ConsumerReport>,
    pub errors: Vec<String>,
    pub client_cpu: crate::system::cpu::ClientCpu,
}

/// This process's own task reports, once its phases are done.
#[derive(Debug, Clone, Copy)]
pub struct LocalReports<'a> {
    pub sends: &'a [SendReport],
    pub acks: &'a [AckReport],
    pub consumers: &'a [ConsumerReport],
}

/// The other processes of a variant, asked at the points where the
/// phases must agree with them.
pub trait Peers {
    /// Whether this process watches the server for the variant (consumer
    /// info samples, the end of the drain, settling): exactly one does.
    fn watches_server(&self) -> bool;

    /// Once this process's clients are connected: the schedule's t0 on
    /// the shared time base, at least `lead_in` ahead, so every publisher
    /// thread is up before its first message is due.
    fn start_time(
        &mut self,
        spec: &DriveSpec,
        lead_in: Duration,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Every tick of the publish phase: this process's counts out, the
    /// others' back.
    fn exchange(
        &mut self,
        local: PeerCounts,
        interrupted: bool,
    ) -> impl Future<Output = Exchange> + Send;

    /// This process has published its share: waits until the others have
    /// too (or the run is interrupted) and returns how many messages they
    /// stored.
    fn published(
        &mut self,
        local: PeerCounts,
        stop: &CancellationToken,
        bar: &VariantBar,
    ) -> impl Future<Output = u64> + Send;

    /// The others' latest counts, while the watcher drains.
    fn counts(&mut self) -> PeerCounts;

    /// A process that does not watch the server drains until the one that
    /// does ends the variant, reporting `counts` meanwhile; `bound` past
    /// the usual drain is a last resort.
    fn hold(
        &mut self,
        bound: Duration,
        counts: impl Fn() -> PeerCounts + Send,
    ) -> impl Future<Output = ()> + Send;

    /// The end of the variant: the others' parts, given this process's.
    fn collect(&mut self, local: LocalReports<'_>) -> impl Future<Output = Vec<PeerPart>> + Send;
}

/// No other process: the whole variant runs here.
#[derive(Debug, Clone, Copy, Default)]
pub struct Alone;

impl Peers for Alone {
    fn watches_server(&self) -> bool {
        true
    }

    async fn start_time(&mut self, _spec: &DriveSpec, lead_in: Duration) -> Result<u64> {
        Ok(clock::now_ns() + lead_in.as_nanos() as u64)
    }

    async fn exchange(&mut self, _local: PeerCounts, _interrupted: bool) -> Exchange {
        Exchange::default()
    }

    async fn published(
        &mut self,
        _local: PeerCounts,
        _stop: &CancellationToken,
        _bar: &VariantBar,
    ) -> u64 {
        0
    }

    fn counts(&mut self) -> PeerCounts {
        PeerCounts::default()
    }

    /// Never asked: a process alone watches the server.
    async fn hold(&mut self, _bound: Duration, _counts: impl Fn() -> PeerCounts + Send) {}

    async fn collect(&mut self, _local: LocalReports<'_>) -> Vec<PeerPart> {
        Vec::new()
    }
}
