//! Phases 2 and 3, start the consumers and then the publishers, both on
//! the variant's agreed timing: consumers first, so the first message
//! finds a reader.

use std::sync::Arc;

use anyhow::Result;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::crash::CrashState;
use super::launch::{ClientProgress, Launcher};
use super::{RunContext, Variant};
use crate::consume::{ConsumerProgress, ConsumerReport, Crash};
use crate::load::{Publisher, Timing};

/// This process's consumer clients while the variant runs: their tasks,
/// their counters, and the crash planned for the first of them.
#[derive(Default)]
pub(super) struct Consumers {
    /// `None` when the variant only publishes.
    launcher: Option<Launcher>,
    pub tasks: Vec<JoinHandle<Result<ConsumerReport>>>,
    pub progress: ClientProgress,
    /// The durable (index into the spec's readers) each progress slot's
    /// client reads.
    pub reader_of: Vec<usize>,
    pub crash: Option<CrashState>,
    /// The reports of clients that crashed as planned.
    pub crashed: Vec<ConsumerReport>,
    /// Ends every consumer client once the variant is collected.
    pub stop: CancellationToken,
}

impl Consumers {
    /// A client ended on its own: it failed.
    pub fn failed(&self) -> bool {
        self.tasks.iter().any(|t| t.is_finished())
    }

    /// Whether the planned crash (if any) and its rebind are behind us.
    pub fn crash_done(&self) -> bool {
        self.crash.as_ref().is_none_or(|c| c.done())
    }

    /// Crashes the first client when its time has come, and binds its
    /// replacement at the planned time.
    pub async fn advance_crash(&mut self, ctx: &RunContext) -> Result<()> {
        if let (Some(state), Some(launcher)) = (self.crash.as_mut(), self.launcher.as_ref()) {
            state
                .advance(
                    ctx,
                    launcher,
                    &mut self.tasks,
                    &mut self.crashed,
                    &self.progress.0,
                )
                .await?;
        }
        Ok(())
    }
}

impl Variant<'_> {
    /// Spawns a task per consumer client of the share (on the binding it
    /// has when its connection is shared), the first one armed to crash
    /// when the spec plans a crash.
    pub(super) fn start_consumers(
        &mut self,
        clients: Vec<async_nats::Client>,
        bound: Option<Vec<crate::consume::Bound>>,
    ) {
        let spec = self.spec;
        let timing = (self.timing.t0_ns, self.timing.record_from_ns);
        let launcher = (!spec.readers.is_empty()).then(|| {
            Launcher::new(
                self.ctx,
                spec,
                timing,
                self.expected,
                self.consumers.stop.clone(),
            )
        });
        let crash_plan = spec.consumer().and_then(|c| c.crash);
        let consumers = &mut self.consumers;
        consumers.reader_of = self
            .share
            .consumers
            .iter()
            .map(|&i| spec.reader_of(i))
            .collect();
        if crash_plan.is_some() {
            consumers.reader_of.push(0);
        }
        consumers.progress = ClientProgress(
            (0..consumers.reader_of.len())
                .map(|_| Arc::new(ConsumerProgress::default()))
                .collect(),
        );
        let mut bound = bound.map(Vec::into_iter);
        if let Some(launcher) = &launcher {
            for (k, (client, &i)) in clients.into_iter().zip(&self.share.consumers).enumerate() {
                let token = (k == 0).then(CancellationToken::new);
                let crash_signal = crash_plan.zip(token.clone()).map(|(plan, at)| Crash {
                    at,
                    point: plan.point,
                });
                consumers.tasks.push(launcher.spawn(
                    client,
                    (consumers.reader_of[k], i),
                    bound.as_mut().and_then(Iterator::next),
                    consumers.progress.0[k].clone(),
                    crash_signal,
                ));
                if let (Some(plan), Some(token)) = (crash_plan, token) {
                    consumers.crash = Some(CrashState::new(plan, token, self.timing.t0_ns));
                }
            }
        }
        consumers.launcher = launcher;
    }
}

/// Sets every publisher's schedule going.
pub(super) fn start_publishers(mut publishers: Vec<Publisher>, timing: Timing) -> Vec<Publisher> {
    for p in &mut publishers {
        p.go(timing);
    }
    publishers
}
