//! How far a worker's clock is from the coordinator's, and how sure we are.
//!
//! The NTP estimate over request/reply: the coordinator notes `t0` when it
//! sends a ping and `t3` when the reply arrives, on its clock; the worker
//! notes `t1` on receipt and `t2` on reply, on its own. If the two legs
//! took equally long, the worker's clock is ahead by
//! `((t1 - t0) + (t2 - t3)) / 2`; since nobody knows that they did, the
//! truth lies within half the round trip spent on the wire,
//! `((t3 - t0) - (t2 - t1)) / 2`, of it. Of several exchanges the one with
//! the shortest round trip has the tightest bound, so that one is kept: a
//! sample delayed by a busy scheduler or a queued message only ever widens
//! the bound, never moves the estimate outside it.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};

use super::auth::Link;
use super::protocol::{Command, Reply};
use crate::record::clock;

/// One exchange: coordinator send and receive (`t0`, `t3`, its clock),
/// worker receive and send (`t1`, `t2`, the worker's clock), all ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    pub t0: u64,
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
}

impl Exchange {
    /// Worker clock minus coordinator clock, ns.
    pub fn offset_ns(&self) -> i64 {
        let a = self.t1 as i128 - self.t0 as i128;
        let b = self.t2 as i128 - self.t3 as i128;
        ((a + b) / 2) as i64
    }

    /// Round trip minus the worker's own time, ns.
    pub fn delay_ns(&self) -> u64 {
        let total = self.t3.saturating_sub(self.t0);
        total.saturating_sub(self.t2.saturating_sub(self.t1))
    }
}

/// The estimate kept from several exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockEstimate {
    /// Worker clock minus coordinator clock, ns, from the best exchange.
    pub offset_ns: i64,
    /// That exchange's round trip on the wire, ns.
    pub rtt_ns: u64,
    /// Half of it: the true offset is within this of `offset_ns`.
    pub uncertainty_ns: u64,
    /// Exchanges made.
    pub samples: usize,
}

/// The lowest-delay exchange's estimate; `None` without exchanges.
pub fn estimate(exchanges: &[Exchange]) -> Option<ClockEstimate> {
    let best = exchanges.iter().min_by_key(|e| e.delay_ns())?;
    let rtt = best.delay_ns();
    Some(ClockEstimate {
        offset_ns: best.offset_ns(),
        rtt_ns: rtt,
        uncertainty_ns: rtt.div_ceil(2),
        samples: exchanges.len(),
    })
}

/// Exchanges per estimate: enough that one of them meets an idle path.
pub const EXCHANGES: usize = 16;

/// Measures a worker's clock with `n` ping exchanges on `subject`.
pub async fn measure(
    client: &async_nats::Client,
    link: &Link,
    subject: &str,
    n: usize,
) -> Result<ClockEstimate> {
    let mut exchanges = Vec::with_capacity(n);
    for _ in 0..n {
        // Each ping its own number: the worker obeys a number once.
        let (seq, ping) = link.command(&Command::Ping)?;
        let t0 = clock::now_ns();
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            client.request(subject.to_string(), ping.into()),
        )
        .await
        .map_err(|_| anyhow!("no answer to a clock ping within 5s"))?
        .context("clock ping")?;
        let t3 = clock::now_ns();
        match link.key.open_reply(&link.run, seq, &reply.payload) {
            Ok(Reply::Pong {
                received_ns,
                sent_ns,
            }) => exchanges.push(Exchange {
                t0,
                t1: received_ns,
                t2: sent_ns,
                t3,
            }),
            Ok(other) => return Err(anyhow!("a clock ping was answered with {other:?}")),
            Err(e) => return Err(anyhow!("a clock ping's answer is refused: {e:#}")),
        }
        // Spread the exchanges a little, so they do not all meet one busy
        // moment of the scheduler.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    estimate(&exchanges).ok_or_else(|| anyhow!("no clock exchanges"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker whose clock runs `offset` ahead, a path of `up` and `down`
    /// ns, and `work` ns of the worker's own between receipt and reply.
    fn exchange(at: u64, offset: i64, up: u64, down: u64, work: u64) -> Exchange {
        let t1_true = at + up;
        let t2_true = t1_true + work;
        Exchange {
            t0: at,
            t1: t1_true.wrapping_add_signed(offset),
            t2: t2_true.wrapping_add_signed(offset),
            t3: t2_true + down,
        }
    }

    #[test]
    fn a_symmetric_path_gives_the_offset_exactly() {
        let e = exchange(1_000_000_000, 5_000_000, 40_000, 40_000, 3_000);
        assert_eq!(e.offset_ns(), 5_000_000);
        assert_eq!(e.delay_ns(), 80_000);
        let e = exchange(1_000_000_000, -7_250_000, 40_000, 40_000, 0);
        assert_eq!(e.offset_ns(), -7_250_000);
    }

    #[test]
    fn the_lowest_delay_exchange_wins_and_bounds_the_truth() {
        let offset = 3_217_000i64;
        // Asymmetric and noisy legs: queueing on one side, a slow scheduler
        // on the other; one quiet exchange among them.
        let legs = [
            (900_000, 60_000),
            (50_000, 2_400_000),
            (45_000, 55_000),
            (300_000, 41_000),
            (44_000, 1_000_000),
        ];
        let exchanges: Vec<Exchange> = legs
            .iter()
            .enumerate()
            .map(|(i, &(up, down))| {
                exchange(1_000_000_000 * (i as u64 + 1), offset, up, down, 5_000)
            })
            .collect();
        let est = estimate(&exchanges).unwrap();
        assert_eq!(est.samples, 5);
        assert_eq!(est.rtt_ns, 100_000, "the quiet exchange: 45 us + 55 us");
        assert_eq!(est.uncertainty_ns, 50_000);
        // The estimate is off by half the asymmetry of that exchange...
        assert_eq!(est.offset_ns, offset - 5_000);
        // ...and the true offset lies within the reported uncertainty, as it
        // must for every exchange, however asymmetric.
        for e in &exchanges {
            let err = (e.offset_ns() - offset).unsigned_abs();
            assert!(err <= e.delay_ns().div_ceil(2), "{e:?}: error {err}");
        }
        assert!((est.offset_ns - offset).unsigned_abs() <= est.uncertainty_ns);
    }

    #[test]
    fn no_exchanges_no_estimate() {
        assert_eq!(estimate(&[]), None);
    }

    #[test]
    fn a_worker_behind_the_coordinator_has_a_negative_offset() {
        let e = exchange(5_000_000_000, -2_000_000_000, 10_000, 10_000, 0);
        assert_eq!(e.offset_ns(), -2_000_000_000);
        assert_eq!(e.delay_ns(), 20_000);
    }
}
