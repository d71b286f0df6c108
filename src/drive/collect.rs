//! Phase 6, collect: stop the consumers, gather every task's report and
//! error (and, leading, the other processes' parts), and merge them into
//! one outcome.

use anyhow::{Context, Result};

use super::drain::Drained;
use super::outcome::merge;
use super::sample::Published;
use super::{DriveOutcome, LocalReports, Peers, Variant};
use crate::load::{AckReport, SendReport};

impl Variant<'_> {
    pub(super) async fn collect<P: Peers>(
        self,
        peers: &mut P,
        published: Published,
        drained: Drained,
    ) -> Result<DriveOutcome> {
        let (ctx, share) = (self.ctx, self.share);
        let samples = match self.sampler {
            Some(s) => s.finish().await,
            None => Vec::new(),
        };
        let consumers = self.consumers;
        consumers.stop.cancel();
        let mut consumer_reports = consumers.crashed;
        let mut errors = Vec::new();
        for (i, task) in consumers.tasks.into_iter().enumerate() {
            match task.await.context("joining a consumer task")? {
                Ok(report) => consumer_reports.push(report),
                Err(e) => errors.push(format!("consumer {i}: {e:#}")),
            }
        }
        self.bar.finish();

        let Published {
            mut sends,
            mut acks,
            mut client_cpu,
            server_cpu,
            fault,
            ..
        } = published;
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
        for (c, i) in consumer_reports.iter().zip(&share.consumers) {
            if let Some(e) = &c.first_error {
                errors.push(format!("consumer {i}: {e}"));
            }
        }
        // Say why publishes or acks went unanswered when a server refused them.
        for refusal in ctx.connect.take_refusals() {
            errors.push(format!("the server refused: {refusal}"));
        }

        let parts = peers
            .collect(LocalReports {
                sends: &sends,
                acks: &acks,
                consumers: &consumer_reports,
            })
            .await;
        // Every process's publishers by their index, so every reader of
        // `sends` and `acks` (read-back reconciliation) finds publisher p
        // at position p as in a single process.
        let mut by_index: Vec<(usize, SendReport, AckReport)> = share
            .publishers
            .iter()
            .copied()
            .zip(sends.drain(..).zip(acks.drain(..)))
            .map(|(i, (s, a))| (i, s, a))
            .collect();
        for part in parts {
            by_index.extend(
                part.publishers
                    .into_iter()
                    .map(|p| (p.index, p.send, p.ack)),
            );
            consumer_reports.extend(part.consumers);
            errors.extend(part.errors);
            client_cpu += part.client_cpu;
        }
        by_index.sort_by_key(|(i, _, _)| *i);
        for (_, s, a) in by_index {
            sends.push(s);
            acks.push(a);
        }

        let mut outcome = merge(
            sends,
            acks,
            consumer_reports,
            self.timing.t0_ns,
            self.timing.record_from_ns,
        );
        outcome.drained = drained.drained;
        outcome.drain_time = drained.time;
        outcome.server_state = drained.server_state;
        outcome.samples = samples;
        outcome.crash = consumers.crash.and_then(|c| c.outcome());
        outcome.fault = fault;
        outcome.client_cpu = client_cpu;
        outcome.server_cpu = server_cpu;
        outcome.interrupted = ctx.stop.is_cancelled();
        outcome.errors = errors;
        Ok(outcome)
    }
}
