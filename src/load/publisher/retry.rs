//! Sending a message again: the retries a plan injects to test the server's
//! deduplication, and the resends of messages whose PubAck is overdue.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use super::{RetryPlan, SendKind, Shared};
use crate::record::clock;
use crate::record::random;

/// Chooses, per send, a new message or a retry of an earlier one.
pub(super) struct RetryChooser {
    plan: RetryPlan,
    seed: u64,
    publisher: u64,
    /// The last 64 new messages `(sent_ns, message)`, candidates for
    /// in-window retries; `recent_count` counts every one ever recorded.
    recent: [(u64, u64); 64],
    recent_count: u64,
    /// New messages not yet old enough for a late retry, oldest first.
    maturing: VecDeque<(u64, u64)>,
    /// The newest message whose window has passed, not retried yet.
    late_candidate: Option<u64>,
}

impl RetryChooser {
    pub(super) fn new(plan: RetryPlan, seed: u64, publisher: u16) -> Self {
        RetryChooser {
            plan,
            seed,
            publisher: u64::from(publisher),
            recent: [(0, 0); 64],
            recent_count: 0,
            maturing: VecDeque::new(),
            late_candidate: None,
        }
    }

    /// What send `k` at `now_ns` carries: `(kind, message number)`.
    #[inline]
    pub(super) fn choose(&mut self, k: u64, now_ns: u64) -> (SendKind, u64) {
        if self.plan.in_window == 0.0 && self.plan.late == 0.0 {
            return (SendKind::New, k);
        }
        let u = random::unit(self.seed, self.publisher, k);
        if u < self.plan.late {
            let late_after = (self.plan.window + self.plan.late_margin).as_nanos() as u64;
            while let Some(&(sent, m)) = self.maturing.front() {
                if now_ns.saturating_sub(sent) < late_after {
                    break;
                }
                self.late_candidate = Some(m);
                self.maturing.pop_front();
            }
            if let Some(m) = self.late_candidate.take() {
                return (SendKind::LateRetry, m);
            }
        } else if u < self.plan.late + self.plan.in_window && self.recent_count > 0 {
            // A recent message, sent well inside the window.
            let fresh_after = now_ns.saturating_sub(self.plan.window.as_nanos() as u64 / 2);
            let pick = random::below(self.seed ^ 1, self.publisher, k, self.recent_count.min(64));
            let (sent, m) = self.recent[pick as usize];
            if sent >= fresh_after {
                return (SendKind::Retry, m);
            }
        }
        (SendKind::New, k)
    }

    /// Records a new message as a candidate for later retries.
    #[inline]
    pub(super) fn sent_new(&mut self, k: u64, sent_ns: u64) {
        if self.plan.in_window > 0.0 {
            self.recent[(self.recent_count % 64) as usize] = (sent_ns, k);
            self.recent_count += 1;
        }
        if self.plan.late > 0.0 {
            self.maturing.push_back((sent_ns, k));
        }
    }
}

/// Gives up on sends whose PubAck is older than `after_ns`: each is marked
/// answered (unless its PubAck won the race) and its message queued to be
/// sent again with the same id.
pub(super) fn scan_overdue(
    shared: &Shared,
    oldest: &mut u64,
    sent: u64,
    after_ns: u64,
    resends: &mut VecDeque<(u64, u64)>,
    abandoned: &mut u64,
) {
    let now = clock::now_ns();
    while *oldest < sent {
        let slot = shared.slot(*oldest);
        if slot.send.load(Ordering::Acquire) != *oldest || slot.answered.load(Ordering::Acquire) {
            *oldest += 1;
            continue;
        }
        let age = now.saturating_sub(slot.sent.load(Ordering::Relaxed));
        let due = if slot.unavailable.load(Ordering::Acquire) {
            UNAVAILABLE_PAUSE_NS.min(after_ns)
        } else {
            after_ns
        };
        if age < due {
            break;
        }
        if !slot.answered.swap(true, Ordering::AcqRel) {
            *abandoned += 1;
            shared.abandoned.store(*abandoned, Ordering::Release);
            resends.push_back((
                slot.message.load(Ordering::Relaxed),
                slot.intended.load(Ordering::Relaxed),
            ));
        }
        *oldest += 1;
    }
}

/// How long a send the server refused as unavailable waits before it is
/// sent again: a leader election takes seconds, and resending at once would
/// only spin.
const UNAVAILABLE_PAUSE_NS: u64 = 250_000_000;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn retries_are_the_planned_fraction_of_recent_messages() {
        let plan = RetryPlan {
            in_window: 0.1,
            late: 0.0,
            window: Duration::from_secs(60),
            late_margin: Duration::from_secs(1),
        };
        let mut chooser = RetryChooser::new(plan, 42, 0);
        let mut retries = 0;
        let mut news = Vec::new();
        for k in 0..10_000u64 {
            let now = 1_000_000 + k * 1_000;
            match chooser.choose(k, now) {
                (SendKind::New, m) => {
                    assert_eq!(m, k);
                    chooser.sent_new(m, now);
                    news.push(m);
                }
                (SendKind::Retry, m) => {
                    retries += 1;
                    let newer = news.iter().rev().take_while(|&&n| n != m).count();
                    assert!(
                        m < k && newer < 64,
                        "one of the last 64 new messages: {m} at {k}"
                    );
                    assert!(news.contains(&m), "retries a new message");
                }
                (SendKind::LateRetry | SendKind::Resend, _) => panic!("no late retries planned"),
            }
        }
        assert!((900..1100).contains(&retries), "{retries}");
        // Deterministic: the same seed chooses the same sends.
        let mut again = RetryChooser::new(plan, 42, 0);
        let first: Vec<_> = (0..50).map(|k| again.choose(k, k).0).collect();
        let mut other = RetryChooser::new(plan, 42, 0);
        assert_eq!(
            first,
            (0..50).map(|k| other.choose(k, k).0).collect::<Vec<_>>()
        );
    }

    #[test]
    fn late_retries_wait_out_the_window_and_retry_each_message_once() {
        let plan = RetryPlan {
            in_window: 0.0,
            late: 0.2,
            window: Duration::from_millis(100),
            late_margin: Duration::from_millis(50),
        };
        let mut chooser = RetryChooser::new(plan, 7, 1);
        let mut retried = Vec::new();
        let mut sent_at = std::collections::HashMap::new();
        for k in 0..2_000u64 {
            let now = k * 1_000_000; // 1 ms apart
            match chooser.choose(k, now) {
                (SendKind::New, m) => {
                    chooser.sent_new(m, now);
                    sent_at.insert(m, now);
                }
                (SendKind::LateRetry, m) => {
                    assert!(
                        now - sent_at[&m] >= 150_000_000,
                        "waited out window + margin"
                    );
                    retried.push(m);
                }
                (SendKind::Retry | SendKind::Resend, _) => panic!("no in-window retries planned"),
            }
        }
        assert!(retried.len() > 100, "{}", retried.len());
        let mut unique = retried.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            retried.len(),
            "each message retried late once"
        );
    }
}
