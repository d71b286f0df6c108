//! Phase 6, collect: stop the consumers, gather every task's report and
//! error (and, leading, the other processes' parts), and merge them into
//! one outcome.

use anyhow::{Context, Result};

use super::drain::Drained;
use super::outcome::merge;
use super::sample::Published;
use super::start::Consumers;
use super::{DriveOutcome, LocalReports, PeerPart, Peers, Share, Variant};
use crate::consume::ConsumerReport;
use crate::load::{AckReport, SendReport};

impl Variant<'_> {
    pub(super) async fn collect<P: Peers>(
        self,
        peers: &mut P,
        published: Published,
        drained: Drained,
    ) -> Result<DriveOutcome> {
        let (ctx, share) = (self.ctx, self.share);
        // The drain is over: what the variant cost both sides ends here.
        let mut client_cpu =
            crate::system::cpu::ClientCpu::since(published.meters.client_cpu_start);
        let server_cpu = published.meters.server_cpu.stop();
        let after_warmup =
            published
                .meters
                .after_warmup
                .map(|(client, server)| super::CpuAfterWarmup {
                    client: crate::system::cpu::ClientCpu::since(client),
                    server: server.stop(),
                });
        let samples = match self.sampler {
            Some(s) => s.finish().await,
            None => Vec::new(),
        };
        let telemetry = finish_telemetry(self.telemetry).await?;
        let mut clients = self.consumers;
        let crash = clients.crash.take();
        let reader_of = std::mem::take(&mut clients.reader_of);
        let stopped = stop_consumers(clients).await?;
        self.bar.finish();
        let (fault, pause) = (published.fault, published.pause);
        let mut outcome = if !self.spec.is_simple() {
            let timing = (self.timing.t0_ns, self.timing.record_from_ns);
            let clients = stopped
                .into_iter()
                .map(|(k, report)| (reader_of.get(k).copied().unwrap_or(0), report))
                .collect();
            let sent = (published.sends.clone(), published.acks.clone());
            let (mut whole, parts) =
                super::parts::split(ctx, self.spec, sent, clients, &drained.states, timing).await;
            whole
                .errors
                .extend(task_errors(share, &published.sends, &published.acks, &[]));
            for refusal in ctx.connect.take_refusals() {
                whole.errors.push(format!("the server refused: {refusal}"));
            }
            for p in &parts {
                whole.errors.extend(p.durables.iter().filter_map(|d| {
                    d.error
                        .as_ref()
                        .map(|e| format!("consumer of {}: {e}", d.name))
                }));
            }
            whole.parts = parts;
            whole.cpu_after_warmup = after_warmup;
            whole
        } else {
            let mut consumers = Vec::new();
            let mut errors = Vec::new();
            for (i, (_, report)) in stopped.into_iter().enumerate() {
                match report {
                    Ok(report) => consumers.push(report),
                    Err(e) => errors.push(format!("consumer {i}: {e}")),
                }
            }
            let (mut sends, mut acks) = (published.sends, published.acks);
            errors.extend(task_errors(share, &sends, &acks, &consumers));
            // Say why publishes or acks went unanswered when a server refused them.
            for refusal in ctx.connect.take_refusals() {
                errors.push(format!("the server refused: {refusal}"));
            }

            let parts = peers
                .collect(LocalReports {
                    sends: &sends,
                    acks: &acks,
                    consumers: &consumers,
                })
                .await;
            for part in &parts {
                client_cpu += part.client_cpu;
            }
            let after_warmup = after_warmup.filter(|_| parts.is_empty());
            (sends, acks) = by_publisher(share, sends, acks, parts, &mut consumers, &mut errors);

            let mut outcome = merge(
                sends,
                acks,
                consumers,
                self.timing.t0_ns,
                self.timing.record_from_ns,
            );
            if let Some(due) = self.spec.streams.first().and_then(|s| s.due.as_ref()) {
                for seq in due.iter() {
                    outcome
                        .ledger
                        .mark(seq, crate::record::ledger::Event::Persisted);
                }
                outcome.counts = super::outcome::recount(&outcome);
            }
            outcome.crash = crash.and_then(|c| c.outcome());
            outcome.cpu_after_warmup = after_warmup;
            outcome.errors = errors;
            outcome
        };
        outcome.drained = drained.drained;
        outcome.drain_time = drained.time;
        outcome.server_state = drained.server_state;
        outcome.samples = samples;
        outcome.telemetry = telemetry;
        outcome.memory = self.memory;
        outcome.fault = fault;
        outcome.pause = pause;
        outcome.client_cpu = client_cpu;
        outcome.server_cpu = server_cpu;
        outcome.interrupted = ctx.stop.is_cancelled();
        // A load of several attributes each durable's losses in its part;
        // a core baseline has no stream to ask.
        if self.spec.is_simple() && !self.spec.consumer().is_some_and(|c| c.core) {
            outcome
                .attribute_losses(ctx.provisioner.jetstream(), self.spec.stream())
                .await;
        }
        // The merge above holds every report and its copy at once: the
        // peak often falls here, after the run loop's last sample.
        outcome.memory.close();
        Ok(outcome)
    }
}

/// Stops the telemetry sampler (its thread does blocking HTTP) and takes
/// what it sampled.
pub(super) async fn finish_telemetry(
    sampler: Option<crate::server::telemetry::TelemetrySampler>,
) -> Result<Option<crate::server::telemetry::Telemetry>> {
    match sampler {
        Some(t) => tokio::task::spawn_blocking(move || t.finish())
            .await
            .context("joining the telemetry sampler")
            .map(Some),
        None => Ok(None),
    }
}

/// Ends every consumer client and joins its task: the reports of the
/// crashed clients first (the first client's slot), then each client's
/// report or error, by its progress slot.
async fn stop_consumers(
    consumers: Consumers,
) -> Result<Vec<(usize, Result<ConsumerReport, String>)>> {
    consumers.stop.cancel();
    let mut reports: Vec<_> = consumers.crashed.into_iter().map(|r| (0, Ok(r))).collect();
    let crashed = reports.len();
    for (i, task) in consumers.tasks.into_iter().enumerate() {
        let report = task.await.context("joining a consumer task")?;
        // A crash moved the first client's task out: the others keep their slots.
        let slot = if crashed > 0 { i + 1 } else { i };
        reports.push((slot, report.map_err(|e| format!("{e:#}"))));
    }
    Ok(reports)
}

/// The first error each task of the share recorded, named by its index in
/// the whole variant.
fn task_errors(
    share: &Share,
    sends: &[SendReport],
    acks: &[AckReport],
    consumers: &[ConsumerReport],
) -> Vec<String> {
    let mut errors = Vec::new();
    for (s, i) in sends.iter().zip(&share.publishers) {
        for e in [&s.first_error, &s.stalled].into_iter().flatten() {
            errors.push(format!("publisher {i}: {e}"));
        }
    }
    for (a, i) in acks.iter().zip(&share.publishers) {
        if let Some(e) = &a.first_error {
            errors.push(format!("publisher {i} PubAcks: {e}"));
        }
    }
    for (c, i) in consumers.iter().zip(&share.consumers) {
        if let Some(e) = &c.first_error {
            errors.push(format!("consumer {i}: {e}"));
        }
    }
    errors
}

/// Every process's publishers by their index, so every reader of `sends`
/// and `acks` (read-back reconciliation) finds publisher p at position p
/// as in a single process; the parts' consumers and errors join this
/// process's.
fn by_publisher(
    share: &Share,
    sends: Vec<SendReport>,
    acks: Vec<AckReport>,
    parts: Vec<PeerPart>,
    consumers: &mut Vec<ConsumerReport>,
    errors: &mut Vec<String>,
) -> (Vec<SendReport>, Vec<AckReport>) {
    let mut by_index: Vec<(usize, SendReport, AckReport)> = share
        .publishers
        .iter()
        .copied()
        .zip(sends.into_iter().zip(acks))
        .map(|(i, (s, a))| (i, s, a))
        .collect();
    for part in parts {
        by_index.extend(
            part.publishers
                .into_iter()
                .map(|p| (p.index, p.send, p.ack)),
        );
        consumers.extend(part.consumers);
        errors.extend(part.errors);
    }
    by_index.sort_by_key(|(i, _, _)| *i);
    by_index.into_iter().map(|(_, s, a)| (s, a)).unzip()
}
