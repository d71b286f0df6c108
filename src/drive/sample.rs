//! Phase 4, run and sample: from the first intended send until the last
//! publisher has finished, the progress bar, the exchange with the other
//! processes, the planned crash or kill, and consumer info on an interval.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::jetstream;
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::connect::Meters;
use super::launch::ClientProgress;
use super::pace::Pace;
use super::state::consumer_state;
use super::{ConsumerSample, FaultOutcome, PauseOutcome, Peers, Variant, fault};
use crate::load::{AckReport, Publisher, SendReport};
use crate::record::clock;

/// How long a failed variant waits for its stopped publishers: their last
/// PubAcks, up to the default PubAck timeout, and some slack.
const STOP_AFTER_FAILURE: Duration = Duration::from_secs(15);

/// What the publish phase leaves: every publisher's reports, what was
/// stored, and the meters read when the last publisher finished.
pub(super) struct Published {
    pub sends: Vec<SendReport>,
    pub acks: Vec<AckReport>,
    /// Messages this process's PubAcks confirmed stored.
    pub local_stored: u64,
    /// Everything the consumers must finish: the preload, and what every
    /// process stored.
    pub stored: u64,
    /// When this process (and, leading, every process) had published.
    pub end: Instant,
    /// Read once the drain has ended too.
    pub meters: Meters,
    /// The planned server kill, when there was one.
    pub fault: Option<FaultOutcome>,
    /// The planned consumer pause, when there was one.
    pub pause: Option<PauseOutcome>,
}

impl Published {
    pub fn sent(&self) -> u64 {
        self.sends.iter().map(|s| s.sent).sum()
    }
}

impl Variant<'_> {
    pub(super) async fn run_and_sample<P: Peers>(
        &mut self,
        peers: &mut P,
        publishers: Vec<Publisher>,
        mut meters: Meters,
        publish_stop: CancellationToken,
    ) -> Result<Published> {
        self.sampler = self.start_sampler(peers.watches_server());
        if peers.watches_server() {
            self.telemetry = crate::server::telemetry::TelemetrySampler::start(
                &self.ctx.monitors,
                crate::server::telemetry::SAMPLE_EVERY,
            );
        }
        let mut pace = Pace::of(&publishers);
        let mut fault = None;
        let mut pause = None;
        let finishing = join_all(publishers.into_iter().map(Publisher::finish));
        tokio::pin!(finishing);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let warmup_end = tokio::time::sleep(Duration::from_nanos(
            self.timing.record_from_ns.saturating_sub(clock::now_ns()),
        ));
        tokio::pin!(warmup_end);
        let results = loop {
            tokio::select! {
                results = &mut finishing => break results,
                _ = &mut warmup_end, if meters.after_warmup.is_none() => {
                    meters.after_warmup =
                        Some((crate::system::cpu::ClientCpu::now(), self.ctx.server_cpu.start()));
                }
                _ = tick.tick() => {
                    if let Err(e) = self.tick(peers, &mut pace, &publish_stop, (&mut fault, &mut pause)).await {
                        // A variant that failed mid-run (a fault it could
                        // not inject, a pause the server refused) stops its
                        // publishers and waits for them: left running, they
                        // published into the next variant's measurement
                        // and their threads outlived the run.
                        publish_stop.cancel();
                        let _ = tokio::time::timeout(STOP_AFTER_FAILURE, &mut finishing).await;
                        return Err(e);
                    }
                }
            }
        };
        // Every publisher's sends and PubAcks apart; the first error if one failed.
        let (sends, acks): (Vec<SendReport>, Vec<AckReport>) = results
            .into_iter()
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let local_stored = acks.iter().map(AckReport::stored).sum::<u64>();
        // Other processes publish on their own slots of the schedule and
        // finish about when this one does; the drain starts once the last
        // of them has.
        let local = self
            .consumers
            .progress
            .counts(sends.iter().map(|s| s.sent).sum(), local_stored);
        let peer_stored = peers.published(local, &self.ctx.stop, &self.bar).await;
        Ok(Published {
            sends,
            acks,
            local_stored,
            stored: self.spec.preloaded() + local_stored + peer_stored,
            end: Instant::now(),
            meters,
            fault,
            pause,
        })
    }

    /// Consumer info on the spec's interval, from the one process that
    /// watches the server.
    fn start_sampler(&self, watches_server: bool) -> Option<Sampler> {
        let spec = self.spec;
        let consumer = spec.consumer().filter(|_| watches_server)?;
        let every = consumer.sample_every?;
        Some(Sampler::start(
            self.ctx.provisioner.jetstream().clone(),
            spec.stream(),
            &consumer.durable,
            self.consumers.progress.clone(),
            self.peer_in_flight.clone(),
            every,
        ))
    }

    /// One tick while publishers run: counts exchanged with the other
    /// processes, the progress bar, the planned crash or kill when due,
    /// and publishing stopped when a consumer failed or the leader halts.
    async fn tick<P: Peers>(
        &mut self,
        peers: &mut P,
        pace: &mut Pace,
        publish_stop: &CancellationToken,
        (fault, pause): (&mut Option<FaultOutcome>, &mut Option<PauseOutcome>),
    ) -> Result<()> {
        let (ctx, spec) = (self.ctx, self.spec);
        let local_sent = pace.local_sent();
        let local = self.consumers.progress.counts(local_sent, 0);
        self.memory.note(clock::now_ns(), local_sent);
        let exchange = peers.exchange(local, ctx.stop.is_cancelled()).await;
        self.peer_in_flight
            .store(exchange.others.in_flight, Ordering::Relaxed);
        if exchange.halt {
            publish_stop.cancel();
        }
        pace.show(
            &self.bar,
            local_sent + exchange.others.sent,
            local.received + exchange.others.received,
            local.in_flight + exchange.others.in_flight,
        );
        self.consumers.advance_crash(ctx).await?;
        if let Some(plan) = spec.fault
            && fault.is_none()
            && clock::now_ns() >= self.timing.t0_ns + plan.after.as_nanos() as u64
        {
            self.bar.phase("server down");
            *fault = Some(fault::inject(ctx, spec, plan).await?);
        }
        if let Some(consumer) = spec.consumer()
            && let Some(plan) = consumer.outage.filter(|o| o.pause)
            && pause.is_none()
            && peers.watches_server()
        {
            let (start, end) = super::pause::window(&plan, self.timing.t0_ns);
            if clock::now_ns() >= start {
                self.bar.phase("consumer paused");
                *pause = Some(super::pause::pause(ctx, spec, &consumer.durable, end).await?);
            }
        }
        if self.consumers.failed() {
            // A consumer ended on its own: it failed. Stop publishing.
            publish_stop.cancel();
        }
        Ok(())
    }
}

/// Samples consumer info on a fixed interval, from the control connection.
pub(super) struct Sampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<ConsumerSample>>,
}

impl Sampler {
    fn start(
        js: jetstream::Context,
        stream: &str,
        durable: &str,
        clients: ClientProgress,
        peers_in_flight: Arc<AtomicU64>,
        every: Duration,
    ) -> Sampler {
        let stop = CancellationToken::new();
        let (stream, durable, halt) = (stream.to_string(), durable.to_string(), stop.clone());
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = halt.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let client_in_flight =
                    clients.in_flight() + peers_in_flight.load(Ordering::Relaxed);
                if let Some(s) = consumer_state(&js, &stream, &durable).await {
                    samples.push(ConsumerSample {
                        at_ns: clock::now_ns(),
                        num_pending: s.num_pending,
                        num_ack_pending: s.num_ack_pending as u64,
                        num_redelivered: s.num_redelivered as u64,
                        client_in_flight,
                    });
                }
            }
            samples
        });
        Sampler { stop, task }
    }

    pub async fn finish(self) -> Vec<ConsumerSample> {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}
