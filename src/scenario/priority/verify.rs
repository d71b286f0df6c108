//! The checks of a priority-group run, over what the clients and the pin
//! watch observed: pure functions, so each can be fed a run with the
//! violation it exists to catch.
//!
//! Deliveries are ordered by their consumer sequence, the server's own
//! order of deliveries, never by when a client happened to read them.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::consume::group::{GroupDelivery, PullEnd, PullRecord};
use crate::record::ledger::{Event, LedgerShard};
use crate::streams::pins::{PinChange, PinEvent};
use crate::variant::Invariant;

pub const NOTHING_LOST: &str = "every persisted message acked by a client";
pub const WITHIN_PIN: &str = "every delivery went to the client pinned at that moment";
pub const DOUBLES_EXPLAINED: &str =
    "every message delivered to two clients was held unacked by the killed client";
pub const PIN_MOVES_AFTER_KILL: &str = "the pin moves to another client after the kill";
pub const NO_EARLY_FAILOVER: &str =
    "the pin moves no sooner than priority_timeout after the pinned client's last pull";
pub const PIN_MOVES_AFTER_UNPIN: &str = "the unpin API releases the pin and a new one is given";
pub const OVERFLOW_THRESHOLD: &str = "overflow clients receive only past their threshold";
pub const PRIORITY_ORDER: &str =
    "a lower level receives only while every higher level's requests are filled";

/// The longest grace (see [`grace_ns`]): generous, since reader tasks on a
/// busy 2-core machine can be late by tens of milliseconds, and bounds what
/// is structural (the server's choice), not what is fast.
pub const GRACE_NS: u64 = 250_000_000;

/// The shortest grace: below it the check would weigh the readers'
/// lateness rather than the server's choice, so the plan refuses an
/// `expires` whose grace would be shorter.
pub const MIN_GRACE_NS: u64 = 50_000_000;

/// How long a pull request is given to reach the server before a delivery
/// elsewhere counts against it, and how long before its end it stops
/// counting: a quarter of the pull's `expires`, at most [`GRACE_NS`]. A
/// fixed grace on both ends left nothing of a pull of twice its length to
/// count, so the check could not fire on short pulls; a quarter leaves the
/// middle half of every pull checked, whatever its length.
pub fn grace_ns(expires: Duration) -> u64 {
    u64::try_from(expires.as_nanos() / 4).map_or(GRACE_NS, |g| g.min(GRACE_NS))
}

/// Clock slack for comparisons of two instants on jsbench's clock.
const SLACK_NS: u64 = 5_000_000;

/// Every persisted message must end acked by some client. A loss names
/// who lost it: the server (never delivered) or a client (delivered, never
/// acked: the killed client held it and the server did not hand it to
/// anyone else before the drain ended).
pub fn nothing_lost(ledger: &LedgerShard, deliveries: &[GroupDelivery]) -> Invariant {
    let mut persisted = 0u64;
    let (mut never_delivered, mut held) = (Vec::new(), Vec::new());
    for seq in 1..=ledger.max_seq() {
        if ledger.count(seq, Event::Persisted) == 0 {
            continue;
        }
        persisted += 1;
        if ledger.count(seq, Event::Acked) > 0 {
            continue;
        }
        if ledger.count(seq, Event::Delivered) == 0 {
            never_delivered.push(seq);
        } else {
            held.push(seq);
        }
    }
    let lost = never_delivered.len() + held.len();
    if lost == 0 {
        return Invariant::check(
            NOTHING_LOST,
            true,
            format!("0 of {persisted} persisted messages unacked"),
        );
    }
    let holders = |seq: u64| -> Vec<usize> {
        let mut c: Vec<usize> = deliveries
            .iter()
            .filter(|d| d.stream_seq == seq)
            .map(|d| d.client)
            .collect();
        c.dedup();
        c
    };
    let mut detail = format!("{lost} of {persisted} persisted messages never acked");
    if !never_delivered.is_empty() {
        detail.push_str(&format!(
            "; lost by the server: {} never delivered (first {:?})",
            never_delivered.len(),
            &never_delivered[..never_delivered.len().min(5)]
        ));
    }
    if let Some(&first) = held.first() {
        detail.push_str(&format!(
            "; lost by a client: {} delivered but never acked (first {first}, delivered to clients {:?})",
            held.len(),
            holders(first)
        ));
    }
    Invariant::check(NOTHING_LOST, false, detail)
}

/// What the drive left for measure and verify: every client's
/// deliveries and pulls, the pin advisories, the client killed and when,
/// when the unpin request was sent.
#[derive(Default)]
pub struct Observed {
    pub deliveries: Vec<GroupDelivery>,
    pub pulls: Vec<PullRecord>,
    pub events: Vec<PinEvent>,
    pub ledger: LedgerShard,
    pub killed: Option<(usize, u64)>,
    pub unpin_ns: Option<u64>,
    pub t0_ns: u64,
    pub publish_rate: f64,
    pub wrong_pin: u64,
}

/// The deliveries outside the pin, in the server's order: one with no
/// pin, one whose pin another client was given first, and one of a pin
/// already superseded (an older pin's delivery after a newer pin's first).
pub fn outside_pin(deliveries: &[GroupDelivery]) -> Vec<GroupDelivery> {
    let mut ordered: Vec<&GroupDelivery> = deliveries.iter().collect();
    ordered.sort_by_key(|d| d.consumer_seq);
    let mut owner: BTreeMap<u16, (usize, usize)> = BTreeMap::new();
    let mut newest: Option<usize> = None;
    let mut outside = Vec::new();
    for d in ordered {
        let Some(pin) = d.pin else {
            outside.push(*d);
            continue;
        };
        let order = owner.len();
        let &mut (client, rank) = owner.entry(pin).or_insert((d.client, order));
        if client != d.client || newest.is_some_and(|n| rank < n) {
            outside.push(*d);
        }
        newest = Some(newest.map_or(rank, |n| n.max(rank)));
    }
    outside
}

/// Passes when none of `total` deliveries is `what` `found` says; the
/// detail counts them and describes the first.
fn none_of<T>(
    name: &str,
    (found, total): (&[T], usize),
    what: &str,
    first: impl Fn(&T) -> String,
) -> Invariant {
    let detail = match found.first() {
        None => format!("0 of {total} {what}"),
        Some(d) => format!("{} of {total} {what} (first: {})", found.len(), first(d)),
    };
    Invariant::check(name, found.is_empty(), detail)
}

pub fn within_pin(deliveries: &[GroupDelivery]) -> Invariant {
    let outside = outside_pin(deliveries);
    let what = "deliveries outside the pin";
    none_of(WITHIN_PIN, (&outside, deliveries.len()), what, |d| {
        format!(
            "stream seq {} to client {} with pin {:?}",
            d.stream_seq, d.client, d.pin
        )
    })
}

/// Messages delivered to two or more clients: `(explained, unexplained)`
/// sequences. Explained: every earlier delivery went unacked to the killed
/// client (whose acks are flushed before it goes), so AckWait handed it on.
pub fn doubles(deliveries: &[GroupDelivery], killed: Option<(usize, u64)>) -> (Vec<u64>, Vec<u64>) {
    let mut by_seq: BTreeMap<u64, Vec<&GroupDelivery>> = BTreeMap::new();
    for d in deliveries {
        by_seq.entry(d.stream_seq).or_default().push(d);
    }
    let held = |d: &GroupDelivery| killed.is_some_and(|(client, _)| d.client == client && !d.acked);
    let (mut explained, mut unexplained) = (Vec::new(), Vec::new());
    for (seq, mut ds) in by_seq {
        ds.sort_by_key(|d| d.consumer_seq);
        let first = ds[0].client;
        if ds.iter().all(|d| d.client == first) {
            continue;
        }
        if ds[..ds.len() - 1].iter().all(|d| held(d)) {
            explained.push(seq);
        } else {
            unexplained.push(seq);
        }
    }
    (explained, unexplained)
}

pub fn doubles_explained(deliveries: &[GroupDelivery], killed: Option<(usize, u64)>) -> Invariant {
    let (explained, unexplained) = doubles(deliveries, killed);
    let detail = format!(
        "{} messages delivered to two clients, {} of them held unacked by the killed client and returned after AckWait{}",
        explained.len() + unexplained.len(),
        explained.len(),
        unexplained
            .first()
            .map(|&s| format!(
                "; unexplained, first stream seq {s}: {}",
                story(deliveries, s)
            ))
            .unwrap_or_default()
    );
    Invariant::check(DOUBLES_EXPLAINED, unexplained.is_empty(), detail)
}

/// Each delivery of `seq` in the server's order: client, delivery count,
/// whether it was acked.
fn story(deliveries: &[GroupDelivery], seq: u64) -> String {
    let mut ds: Vec<&GroupDelivery> = deliveries.iter().filter(|d| d.stream_seq == seq).collect();
    ds.sort_by_key(|d| d.consumer_seq);
    let parts: Vec<String> = ds
        .iter()
        .map(|d| {
            let acked = if d.acked { "acked" } else { "not acked" };
            format!("client {} (delivery {}, {acked})", d.client, d.delivered)
        })
        .collect();
    parts.join(", then ")
}

/// The PINNED advisories, in order of arrival: when and the id.
fn pins(events: &[PinEvent]) -> impl DoubleEndedIterator<Item = (u64, &str)> {
    events.iter().filter_map(|e| match &e.change {
        PinChange::Pinned { id } => Some((e.received_ns, id.as_str())),
        PinChange::Unpinned { .. } => None,
    })
}

/// The first PINNED advisory received after `from_ns`: when and its id.
pub fn next_pin(events: &[PinEvent], from_ns: u64) -> Option<(u64, &str)> {
    pins(events).find(|&(at, _)| at >= from_ns)
}

/// The pin held at `at_ns`: the last PINNED advisory before it.
fn pin_at(events: &[PinEvent], at_ns: u64) -> Option<&str> {
    pins(events)
        .rev()
        .find(|&(at, _)| at <= at_ns)
        .map(|(_, id)| id)
}

/// The killed client's last pull sent before it was killed.
pub fn last_pull_before(pulls: &[PullRecord], client: usize, kill_ns: u64) -> Option<u64> {
    pulls
        .iter()
        .filter(|p| p.client == client && p.sent_ns <= kill_ns)
        .map(|p| p.sent_ns)
        .max()
}

/// After the kill, another client must receive under a new pin.
pub fn pin_moves_after_kill(run: &Observed) -> Invariant {
    let Some((killed, kill_ns)) = run.killed else {
        return Invariant::not_applicable(PIN_MOVES_AFTER_KILL, "no client was killed");
    };
    let next = next_pin(&run.events, kill_ns);
    let receiver = run
        .deliveries
        .iter()
        .filter(|d| d.received_ns > kill_ns && d.client != killed)
        .min_by_key(|d| d.consumer_seq);
    let passed = next.is_some() && receiver.is_some();
    let detail = match (next, receiver) {
        (Some((at, id)), Some(d)) => format!(
            "pinned {id} {:.1} ms after the kill; client {} received from {:.1} ms",
            (at - kill_ns) as f64 / 1e6,
            d.client,
            (d.received_ns - kill_ns) as f64 / 1e6
        ),
        (None, _) => "no PINNED advisory after the kill".to_string(),
        (_, None) => "no other client received after the kill".to_string(),
    };
    Invariant::check(PIN_MOVES_AFTER_KILL, passed, detail)
}

/// The pin may move only once priority_timeout has passed since the
/// pinned client's last pull: the server's timer restarts at each pull
/// carrying the pin, and the advisory is read after the timer fired.
pub fn no_early_failover(run: &Observed, priority_timeout_ns: u64) -> Invariant {
    let Some((killed, kill_ns)) = run.killed else {
        return Invariant::not_applicable(NO_EARLY_FAILOVER, "no client was killed");
    };
    let (Some(last), Some((pinned, _))) = (
        last_pull_before(&run.pulls, killed, kill_ns),
        next_pin(&run.events, kill_ns),
    ) else {
        return Invariant::not_applicable(
            NO_EARLY_FAILOVER,
            "no pull by the killed client, or no new pin, to time",
        );
    };
    if run.unpin_ns.is_some_and(|u| u > kill_ns && u <= pinned) {
        return Invariant::not_applicable(
            NO_EARLY_FAILOVER,
            "the unpin API released the pin before priority_timeout could",
        );
    }
    let waited = pinned.saturating_sub(last);
    let passed = waited + SLACK_NS >= priority_timeout_ns;
    Invariant::check(
        NO_EARLY_FAILOVER,
        passed,
        format!(
            "new pin {:.1} ms after the last pull, priority_timeout {:.1} ms",
            waited as f64 / 1e6,
            priority_timeout_ns as f64 / 1e6
        ),
    )
}

pub fn pin_moves_after_unpin(run: &Observed) -> Invariant {
    let Some(unpin_ns) = run.unpin_ns else {
        return Invariant::not_applicable(PIN_MOVES_AFTER_UNPIN, "no unpin_after in the plan");
    };
    let admin = run.events.iter().any(|e| {
        e.received_ns >= unpin_ns
            && matches!(&e.change, PinChange::Unpinned { reason } if reason == "admin")
    });
    let before = pin_at(&run.events, unpin_ns);
    let next = next_pin(&run.events, unpin_ns);
    let moved = next.is_some_and(|(_, id)| Some(id) != before);
    let detail = match next {
        Some((at, id)) => format!(
            "UNPINNED (admin) seen: {admin}; pinned {id} {:.2} ms after the unpin request (before: {before:?})",
            (at - unpin_ns) as f64 / 1e6
        ),
        None => format!("UNPINNED (admin) seen: {admin}; no PINNED advisory after the unpin"),
    };
    Invariant::check(PIN_MOVES_AFTER_UNPIN, admin && moved, detail)
}

/// An overflow client's delivery is allowed when the server's pending
/// count, this message included (the reply's pending plus one), reached
/// `min_pending`. The ack-pending count at the delivery is not in the
/// reply, so with `min_ack_pending` set the check cannot be made.
pub fn overflow_threshold(
    deliveries: &[GroupDelivery],
    overflow: impl Fn(usize) -> bool,
    min_pending: u64,
    min_ack_pending: u64,
) -> Invariant {
    if min_ack_pending > 0 {
        return Invariant::not_applicable(
            OVERFLOW_THRESHOLD,
            "min_ack_pending is set: the server's ack-pending count at a delivery is not in its reply, so a delivery below min_pending may have been allowed by it",
        );
    }
    let to_overflow = deliveries.iter().filter(|d| overflow(d.client));
    let total = to_overflow.clone().count();
    let early: Vec<&GroupDelivery> = to_overflow
        .filter(|d| d.pending + 1 < min_pending)
        .collect();
    let what = format!("overflow deliveries below min_pending {min_pending}");
    none_of(OVERFLOW_THRESHOLD, (&early, total), &what, |d| {
        format!("stream seq {} at pending {}", d.stream_seq, d.pending + 1)
    })
}

/// Deliveries to a lower level while a higher level's request was open at
/// the server: sent a grace ([`grace_ns`] of the pulls' `expires`) before
/// the delivery was read, and not yet filled (its last message later in the
/// server's order) nor ended (a grace before its end was read).
pub fn inversions(
    deliveries: &[GroupDelivery],
    pulls: &[PullRecord],
    levels: &[u8],
    expires: Duration,
) -> Vec<GroupDelivery> {
    let grace = grace_ns(expires);
    let level = |c: usize| levels.get(c).copied().unwrap_or(u8::MAX);
    let mut by_client: BTreeMap<usize, Vec<&PullRecord>> = BTreeMap::new();
    for p in pulls {
        by_client.entry(p.client).or_default().push(p);
    }
    for ps in by_client.values_mut() {
        ps.sort_by_key(|p| p.sent_ns);
    }
    let open = |p: &PullRecord, d: &GroupDelivery| match p.end {
        PullEnd::Filled { last_consumer_seq } => last_consumer_seq > d.consumer_seq,
        PullEnd::Released { at_ns }
        | PullEnd::WrongPin { at_ns }
        | PullEnd::Abandoned { at_ns } => d.received_ns + grace <= at_ns,
    };
    deliveries
        .iter()
        .filter(|d| {
            by_client.iter().any(|(&c, ps)| {
                if level(c) >= level(d.client) {
                    return false;
                }
                let cutoff = d.received_ns.saturating_sub(grace);
                let i = ps.partition_point(|p| p.sent_ns <= cutoff);
                i > 0 && open(ps[i - 1], d)
            })
        })
        .copied()
        .collect()
}

pub fn priority_order(
    deliveries: &[GroupDelivery],
    pulls: &[PullRecord],
    levels: &[u8],
    expires: Duration,
) -> Invariant {
    let found = inversions(deliveries, pulls, levels, expires);
    let what = "deliveries to a level while a higher one had a request open";
    none_of(PRIORITY_ORDER, (&found, deliveries.len()), what, |d| {
        let level = levels.get(d.client).copied().unwrap_or(0);
        format!(
            "stream seq {} to client {}, level {level}",
            d.stream_seq, d.client
        )
    })
}

#[cfg(test)]
mod tests;
