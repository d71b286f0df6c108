//! Phase 5, drain: wait until every stored message was delivered once,
//! then let the server settle. Interrupted runs still drain briefly, so
//! their ledger is not a list of "lost" messages that were merely in flight.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;

use super::sample::Published;
use super::state::settled_state;
use super::{ConsumerState, Peers, Variant};

/// The drain allowed after a Ctrl-C: enough for in-flight messages.
const INTERRUPTED_DRAIN: Duration = Duration::from_secs(2);

/// How long the server may take, after the clients are done, to show
/// nothing pending.
const SETTLE: Duration = Duration::from_secs(3);

/// How the drain ended.
#[derive(Default)]
pub(super) struct Drained {
    /// Whether every stored message was delivered before the drain timeout
    /// (always true without consumers).
    pub drained: bool,
    /// From the last publish to the end of the drain.
    pub time: Duration,
    /// The durable as the server saw it once settled (the first, when
    /// there are several).
    pub server_state: Option<ConsumerState>,
    /// Every durable so, in the spec's order, when there are several.
    pub states: Vec<Option<ConsumerState>>,
}

impl Variant<'_> {
    pub(super) async fn drain<P: Peers>(
        &mut self,
        peers: &mut P,
        published: &Published,
    ) -> Result<Drained> {
        let (ctx, spec) = (self.ctx, self.spec);
        let mut drained = Drained {
            drained: spec.readers.is_empty(),
            ..Drained::default()
        };
        let Some(c) = spec.consumer() else {
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
            if self.finished(published, others.finished) && self.consumers.crash_done() {
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
        let asks: Vec<_> = (spec.readers.iter())
            .map(|r| {
                let js = ctx.provisioner.jetstream().clone();
                let stream = spec.streams[r.stream].name.clone();
                let durable = r.consumer.durable.clone();
                async move { settled_state(&js, &stream, &durable, settle_until).await }
            })
            .collect();
        let states: Vec<_> = futures::stream::iter(asks)
            .buffered(AT_ONCE)
            .collect()
            .await;
        drained.server_state = states.first().copied().flatten();
        if !spec.is_simple() {
            drained.states = states;
        }
        Ok(drained)
    }

    /// Whether every durable has finished what it is due: every stored
    /// message of its stream (every process's, and the preload), or with a
    /// filter, what its subjects got of a round-robin publisher's sends.
    fn finished(&self, published: &Published, others_finished: u64) -> bool {
        let spec = self.spec;
        let progress = &self.consumers.progress.0;
        if spec.is_simple() {
            return self.consumers.progress.finished() + others_finished >= published.stored;
        }
        // A load of several streams or durables runs in one process.
        let streams = spec.streams.len();
        let on = |s: usize| {
            published
                .acks
                .iter()
                .enumerate()
                .filter(move |(p, _)| p % streams == s)
        };
        spec.readers.iter().enumerate().all(|(r, reader)| {
            let stream = &spec.streams[reader.stream];
            let due: u64 = match &reader.filter {
                Some(subjects) => {
                    let sent = on(reader.stream)
                        .map(|(p, _)| published.sends[p].sent)
                        .sum();
                    let len = stream.subjects.len();
                    subjects.iter().map(|&f| on_subject(sent, len, f)).sum()
                }
                None => {
                    let stored: u64 = on(reader.stream).map(|(_, a)| a.stored()).sum();
                    stored + stream.preloaded
                }
            };
            let finished: u64 = (self.consumers.reader_of.iter().zip(progress))
                .filter(|(of, _)| **of == r)
                .map(|(_, p)| p.finished.load(Ordering::Relaxed))
                .sum();
            finished >= due
        })
    }
}

/// Requests to the server at once when asking about every durable.
const AT_ONCE: usize = 16;

/// Messages `n` in `0..sent` with `n mod subjects == subject`: what one
/// subject of a round-robin publisher received.
pub(super) fn on_subject(sent: u64, subjects: usize, subject: usize) -> u64 {
    let (f, s) = (subjects as u64, subject as u64);
    if sent > s { (sent - s).div_ceil(f) } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::on_subject;

    #[test]
    fn a_round_robin_publisher_splits_its_messages_over_its_subjects() {
        // 10 messages over 4 subjects: 0,4,8 / 1,5,9 / 2,6 / 3,7.
        let counts: Vec<u64> = (0..4).map(|f| on_subject(10, 4, f)).collect();
        assert_eq!(counts, [3, 3, 2, 2]);
        assert_eq!(on_subject(0, 4, 0), 0);
        assert_eq!(on_subject(1, 4, 3), 0);
    }
}
