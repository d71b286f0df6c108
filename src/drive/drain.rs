//! Phase 5, drain: wait until every stored message was delivered once,
//! then let the server settle. Interrupted runs still drain briefly, so
//! their ledger is not a list of "lost" messages that were merely in flight.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::sample::Published;
use super::state::settled_state;
use super::{ConsumerState, Peers, Variant};

/// The drain allowed after a Ctrl-C: enough for in-flight messages.
const INTERRUPTED_DRAIN: Duration = Duration::from_secs(2);

/// How long the server may take, after the clients are done, to show
/// nothing pending.
const SETTLE: Duration = Duration::from_secs(3);

/// How the drain ended.
pub(super) struct Drained {
    /// Whether every stored message was delivered before the drain timeout
    /// (always true without consumers).
    pub drained: bool,
    /// From the last publish to the end of the drain.
    pub time: Duration,
    /// The durable as the server saw it once settled.
    pub server_state: Option<ConsumerState>,
}

impl Variant<'_> {
    pub(super) async fn drain<P: Peers>(
        &mut self,
        peers: &mut P,
        published: &Published,
    ) -> Result<Drained> {
        let (ctx, spec) = (self.ctx, self.spec);
        let mut drained = Drained {
            drained: spec.consumer.is_none(),
            time: Duration::ZERO,
            server_state: None,
        };
        let Some(c) = &spec.consumer else {
            return Ok(drained);
        };
        if !peers.watches_server() {
            // Only the watcher sees every process's count: this process
            // drains until it says the variant is done.
            self.bar.phase("draining (until the coordinator stops it)");
            let (progress, sent) = (&self.consumers.progress, published.sent());
            peers
                .hold(spec.drain_timeout + SETTLE, || {
                    progress.counts(sent, published.local_stored)
                })
                .await;
            return Ok(drained);
        }
        self.bar.phase("draining");
        let mut deadline = published.end + spec.drain_timeout;
        loop {
            if ctx.stop.is_cancelled() {
                deadline = deadline.min(published.end + INTERRUPTED_DRAIN);
            }
            if Instant::now() >= deadline {
                break;
            }
            self.consumers.advance_crash(ctx).await?;
            let others = peers.counts();
            self.peer_in_flight
                .store(others.in_flight, Ordering::Relaxed);
            if self.consumers.progress.finished() + others.finished >= published.stored
                && self.consumers.crash_done()
            {
                drained.drained = true;
                break;
            }
            if self.consumers.failed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drained.time = published.end.elapsed();
        if c.core {
            // No durable: nothing on the server to settle.
            return Ok(drained);
        }
        // The server settles later than the clients: fire-and-forget acks
        // are processed after they are sent, and a message that failed its
        // last delivery is let go only when that delivery's deadline expires.
        let settle_until = if drained.drained {
            deadline.max(Instant::now() + SETTLE)
        } else {
            Instant::now()
        };
        drained.server_state = settled_state(
            ctx.provisioner.jetstream(),
            &spec.stream,
            &c.durable,
            settle_until,
        )
        .await;
        Ok(drained)
    }
}
