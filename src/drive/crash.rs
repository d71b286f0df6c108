//! The resume scenario's crash, timed from inside the run-and-sample
//! phase: the first consumer client dies at the planned point, the server
//! is asked what it left unacked, and a new client binds to the durable.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use super::launch::Launcher;
use super::state::consumer_state;
use super::{CrashOutcome, CrashPlan, RunContext};
use crate::consume::{ConsumerProgress, ConsumerReport};
use crate::record::clock;

pub(super) struct CrashState {
    plan: CrashPlan,
    token: CancellationToken,
    due_ns: u64,
    outcome: Option<CrashOutcome>,
}

/// How long after a crash the server is asked what the dead client left
/// unacked: long enough for it to notice the closed connection.
const CRASH_SETTLE: Duration = Duration::from_millis(200);

impl CrashState {
    pub fn new(plan: CrashPlan, token: CancellationToken, t0_ns: u64) -> Self {
        CrashState {
            plan,
            token,
            due_ns: t0_ns + plan.after.as_nanos() as u64,
            outcome: None,
        }
    }

    pub fn done(&self) -> bool {
        self.outcome.is_some()
    }

    pub fn outcome(self) -> Option<CrashOutcome> {
        self.outcome
    }

    /// When due, crashes the first client, asks the server what it left
    /// unacked, and binds a new client at the planned time. The caller's
    /// loop pauses meanwhile; publishers and other clients do not.
    pub async fn advance(
        &mut self,
        ctx: &RunContext,
        launcher: &Launcher,
        tasks: &mut Vec<tokio::task::JoinHandle<Result<ConsumerReport>>>,
        crashed: &mut Vec<ConsumerReport>,
        progress: &[Arc<ConsumerProgress>],
    ) -> Result<()> {
        if self.outcome.is_some() || clock::now_ns() < self.due_ns || tasks.is_empty() {
            return Ok(());
        }
        self.token.cancel();
        let report = tasks
            .remove(0)
            .await
            .context("joining the crashing consumer")??;
        let crash = report.crashed.clone().unwrap_or_default();
        crashed.push(report);
        tokio::time::sleep(CRASH_SETTLE).await;
        let (stream, durable) = launcher.first();
        let ack_pending_after = consumer_state(ctx.provisioner.jetstream(), stream, durable)
            .await
            .map(|s| s.num_ack_pending as u64);
        let rebind_at = clock::instant_at(crash.at_ns + self.plan.rebind_after.as_nanos() as u64);
        tokio::time::sleep_until(rebind_at.into()).await;
        let client = ctx
            .connect
            .connect_on(crate::system::runtimes::consume(), "consumer-rebound")
            .await?;
        let index = progress.len() - 1;
        let rebound_ns = clock::now_ns();
        tasks.push(launcher.spawn(client, (0, index), None, progress[index].clone(), None));
        self.outcome = Some(CrashOutcome {
            report: crash,
            ack_pending_after,
            rebound_ns,
        });
        Ok(())
    }
}
