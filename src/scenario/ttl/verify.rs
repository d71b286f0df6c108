//! The ttl scenario's measure and verify, over what was observed: each
//! message's deadline against the instant a message get first found it
//! gone, the markers against the subjects whose last message expired, the
//! late reader's deliveries against the deadlines. Plain data in, figures
//! and invariants out, so every invariant's failure is tested by feeding
//! it the violation.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::record::histogram::Recorder;
use crate::streams::expiry::{LateRead, MarkerSeen, Tracked};
use crate::variant::{Invariant, VariantResult};

pub const NOTHING_REMOVED_EARLY: &str = "nothing removed before its deadline";
pub const EXPIRED_REMOVED: &str = "every expired message removed";
pub const NOTHING_DELIVERED_LATE: &str = "nothing delivered after its deadline";
pub const UNEXPIRED_DELIVERED: &str = "late reader got every unexpired message";
pub const MARKERS_ACCOUNTED: &str = "every marker accounted for";

/// The reason the server writes on a marker left by an expiry, a
/// per-message TTL's as well as max_age's (server_behaviour pins it).
pub const EXPIRY_REASON: &str = "MaxAge";

/// A delivery this long after its message's deadline breaks "nothing
/// delivered after its deadline". The server removes what expired in an
/// expiry pass that runs at most every 250 ms, not at delivery, so a
/// read in between still gets it; those deliveries are counted and shown
/// (`late_reader_past_deadline`), and beyond this they are a violation.
pub const DELIVERY_TOLERANCE: Duration = Duration::from_secs(1);

/// A marker is stored as its subject's last message goes (the roll-up
/// that removes it); the follower is given this long to read it.
pub const MARKER_SETTLE: Duration = Duration::from_secs(1);

/// Sequences shown in an invariant's evidence.
const SHOWN: usize = 10;

/// The markers the follower read, with what it was set to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MarkerWatch {
    /// The stream's `subject_delete_marker_ttl`.
    pub ttl: Duration,
    pub seen: Vec<MarkerSeen>,
    /// When the follower stopped: a subject whose last deadline came
    /// after this owes no marker yet.
    pub until_ns: u64,
}

/// Everything a variant observed.
#[derive(Debug, Clone)]
pub struct Observed {
    pub tracked: Vec<Tracked>,
    pub late: Option<LateRead>,
    /// `None` when the stream writes no markers.
    pub markers: Option<MarkerWatch>,
    /// How long after its deadline a message may still be stored before
    /// it counts as not removed.
    pub give_up: Duration,
    /// When the watch ended.
    pub watched_until_ns: u64,
    /// How far a deadline may sit from where jsbench's clock meets the
    /// server's: the server's wall-clock stamp put on jsbench's clock
    /// ([`crate::record::clock::from_wall_uncertainty_ns`]).
    pub clock_tolerance: Duration,
}

/// The measured figures: how late each expiry was seen, how late each
/// marker was stored, what the late reader got.
pub fn measure(o: &Observed, r: &mut VariantResult) {
    let mut lag = Recorder::new();
    let mut window = Recorder::new();
    let mut unknown = 0;
    // Gone within the clock's tolerance before its deadline is on time
    // ([`removed_early`]): a lag of zero, not a lag left out.
    let tolerance = o.clock_tolerance.as_nanos() as u64;
    for t in &o.tracked {
        match (t.stored_ns, t.deadline_ns(), t.gone_ns) {
            (Some(_), Some(deadline), Some(gone)) if gone + tolerance >= deadline => {
                lag.record(gone.saturating_sub(deadline));
                // The removal came after the last get that found it (or
                // its deadline, if later) and before this reply.
                let from = t.last_present_ns.map_or(deadline, |p| p.max(deadline));
                window.record_between(from, gone);
            }
            (None, Some(_), Some(_)) => unknown += 1,
            _ => {}
        }
    }
    r.latency(super::EXPIRY_LAG, &lag);
    r.latency(super::EXPIRY_WINDOW, &window);
    r.count("expired_seen", lag.count());
    r.count("expired_timestamp_unknown", unknown);
    if unknown > 0 {
        r.warnings.push(format!(
            "{unknown} messages were already gone at their first message get: their stored \
             time is unknown and their lag not recorded (did max_age cut a lifetime below the \
             publish phase?)"
        ));
    }
    if let Some(m) = &o.markers {
        let last = last_deadlines(&o.tracked);
        let mut delay = Recorder::new();
        for seen in &m.seen {
            if let Some(Some(deadline)) = seen.subject.and_then(|s| last.get(&s)) {
                delay.record_between(*deadline, seen.stored_ns);
            }
        }
        r.latency(super::MARKER_DELAY, &delay);
        r.count("markers_seen", m.seen.len() as u64);
    }
    if let Some(late) = &o.late {
        let past = past_deadline(&o.tracked, late, Duration::ZERO);
        r.count("late_reader_delivered", late.delivered.len() as u64);
        r.count("late_reader_past_deadline", past.len() as u64);
    }
}

/// Every invariant, in the order the docs list them.
pub fn verify(o: &Observed) -> Vec<Invariant> {
    vec![
        removed_early(&o.tracked, o.clock_tolerance),
        expired_removed(o),
        delivered_late(o),
        unexpired_delivered(o),
        markers_accounted(o),
    ]
}

/// No message seen gone before its deadline, and every message that
/// never expires still there at the end. The deadline is the stored time
/// plus the TTL (the server's own rule, exact to the nanosecond), or the
/// send plus the TTL where the stored time was never seen: the earliest
/// it can be, so an early removal is never excused. The one tolerance is
/// `clock`'s: the stored time is the server's wall-clock stamp put on
/// jsbench's clock, and a removal closer to the deadline than that
/// conversion is sure of cannot be called early.
pub fn removed_early(tracked: &[Tracked], clock: Duration) -> Invariant {
    let tolerance = clock.as_nanos() as u64;
    let early: Vec<String> = tracked
        .iter()
        .filter_map(|t| {
            let gone = t.gone_ns?;
            match t.deadline_ns() {
                Some(d) if gone + tolerance < d => Some(format!(
                    "{} gone {:.1} ms before its deadline",
                    t.seq,
                    (d - gone) as f64 / 1e6
                )),
                None => Some(format!("{} (never expires) gone", t.seq)),
                _ => None,
            }
        })
        .collect();
    let detail = if early.is_empty() {
        format!(
            "0 of {} messages seen gone before their deadline (stored time + TTL, within \
             {}, the server's clock on jsbench's; never-expiring ones checked present at the \
             end)",
            tracked.len(),
            micros(clock)
        )
    } else {
        format!(
            "the server removed {} of {} messages early (by more than {}, the server's clock \
             on jsbench's): {}",
            early.len(),
            tracked.len(),
            micros(clock),
            shown(&early)
        )
    };
    Invariant::check(NOTHING_REMOVED_EARLY, early.is_empty(), detail)
}

/// Every message whose deadline passed before the watch ended was seen
/// gone; one still stored `give_up` after its deadline is a failure (one
/// within it, of a watch cut short, is only counted).
pub fn expired_removed(o: &Observed) -> Invariant {
    let give_up = o.give_up.as_nanos() as u64;
    let due: Vec<&Tracked> = o
        .tracked
        .iter()
        .filter(|t| t.deadline_ns().is_some_and(|d| d <= o.watched_until_ns))
        .collect();
    let (stayed, pending): (Vec<&Tracked>, Vec<&Tracked>) =
        due.iter().filter(|t| t.gone_ns.is_none()).partition(|t| {
            t.deadline_ns()
                .is_some_and(|d| d + give_up <= o.watched_until_ns)
        });
    let stayed: Vec<String> = stayed.iter().map(|t| t.seq.to_string()).collect();
    let detail = if stayed.is_empty() {
        format!(
            "{} of {} messages past their deadline when the watch ended seen gone{}",
            due.len() - pending.len(),
            due.len(),
            match pending.len() {
                0 => String::new(),
                n => format!(" ({n} not yet, within {:?} of their deadline)", o.give_up),
            }
        )
    } else {
        format!(
            "the server still stored {} of {} expired messages {:?} after their deadline: {}",
            stayed.len(),
            due.len(),
            o.give_up,
            shown(&stayed)
        )
    };
    Invariant::check(EXPIRED_REMOVED, stayed.is_empty(), detail)
}

/// The deliveries that came after their message's deadline plus `slack`,
/// as (sequence, how late in ns).
fn past_deadline(tracked: &[Tracked], late: &LateRead, slack: Duration) -> Vec<(u64, u64)> {
    let by_seq: BTreeMap<u64, &Tracked> = tracked.iter().map(|t| (t.seq, t)).collect();
    let slack = slack.as_nanos() as u64;
    late.delivered
        .iter()
        .filter_map(|&(seq, at)| {
            let d = by_seq.get(&seq)?.deadline_ns()?;
            (at > d + slack).then(|| (seq, at - d))
        })
        .collect()
}

/// The late reader got nothing more than [`DELIVERY_TOLERANCE`] past its
/// deadline. Not applicable without a late reader or when no deadline
/// had passed by the time it started.
pub fn delivered_late(o: &Observed) -> Invariant {
    let Some(late) = &o.late else {
        return Invariant::not_applicable(
            NOTHING_DELIVERED_LATE,
            "no late reader (late_reader = false)",
        );
    };
    let passed = o
        .tracked
        .iter()
        .filter(|t| {
            t.deadline_ns()
                .is_some_and(|d| d + (DELIVERY_TOLERANCE.as_nanos() as u64) < late.start_ns)
        })
        .count();
    if passed == 0 {
        return Invariant::not_applicable(
            NOTHING_DELIVERED_LATE,
            "no deadline had passed by more than the tolerance when the late reader started",
        );
    }
    let late_ones: Vec<String> = past_deadline(&o.tracked, late, DELIVERY_TOLERANCE)
        .into_iter()
        .map(|(seq, by)| format!("{seq} {:.0} ms after its deadline", by as f64 / 1e6))
        .collect();
    let detail = if late_ones.is_empty() {
        format!(
            "{} deliveries, none more than {DELIVERY_TOLERANCE:?} after its deadline; {passed} \
             messages had expired before the read",
            late.delivered.len()
        )
    } else {
        format!(
            "the server delivered {} expired messages: {}",
            late_ones.len(),
            shown(&late_ones)
        )
    };
    Invariant::check(NOTHING_DELIVERED_LATE, late_ones.is_empty(), detail)
}

/// Every message whose deadline came after the read ended (or that never
/// expires), and that was not removed early, was delivered to the late
/// reader exactly once.
pub fn unexpired_delivered(o: &Observed) -> Invariant {
    let Some(late) = &o.late else {
        return Invariant::not_applicable(
            UNEXPIRED_DELIVERED,
            "no late reader (late_reader = false)",
        );
    };
    let mut got: BTreeMap<u64, u32> = BTreeMap::new();
    for &(seq, _) in &late.delivered {
        *got.entry(seq).or_default() += 1;
    }
    let owed: Vec<&Tracked> = o
        .tracked
        .iter()
        .filter(|t| t.deadline_ns().is_none_or(|d| d > late.end_ns))
        .filter(|t| t.gone_ns.is_none_or(|g| g > late.end_ns))
        .collect();
    let missing: Vec<String> = owed
        .iter()
        .filter(|t| !got.contains_key(&t.seq))
        .map(|t| t.seq.to_string())
        .collect();
    let twice: Vec<String> = got
        .iter()
        .filter(|&(_, &n)| n > 1)
        .map(|(seq, n)| format!("{seq} x{n}"))
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "the server did not deliver {} unexpired messages: {}",
            missing.len(),
            shown(&missing)
        ));
    }
    if !twice.is_empty() {
        problems.push(format!("delivered more than once: {}", shown(&twice)));
    }
    let detail = if problems.is_empty() {
        format!(
            "all {} messages unexpired at the read's end delivered once",
            owed.len()
        )
    } else {
        problems.join("; ")
    };
    Invariant::check(UNEXPIRED_DELIVERED, problems.is_empty(), detail)
}

/// Per subject, the latest deadline of its messages; `None` for a subject
/// with a message that never expires (it owes no marker).
fn last_deadlines(tracked: &[Tracked]) -> BTreeMap<u32, Option<u64>> {
    let mut last: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for t in tracked {
        let entry = last.entry(t.subject).or_insert(Some(0));
        *entry = match (*entry, t.deadline_ns()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    last
}

/// Per subject, when its last message was seen gone; `None` while one
/// was not.
fn last_gone(tracked: &[Tracked]) -> BTreeMap<u32, Option<u64>> {
    let mut last: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for t in tracked {
        let entry = last.entry(t.subject).or_insert(Some(0));
        *entry = entry.zip(t.gone_ns).map(|(a, b)| a.max(b));
    }
    last
}

/// One marker for each subject whose messages were all seen gone at
/// least [`MARKER_SETTLE`] before the follower stopped (or whose last
/// deadline passed `give_up` before it), with the reason of an expiry, and nothing else:
/// each missing, doubled or extra one named. Not applicable without
/// markers.
pub fn markers_accounted(o: &Observed) -> Invariant {
    let Some(m) = &o.markers else {
        return Invariant::not_applicable(MARKERS_ACCOUNTED, "the stream writes no markers");
    };
    let give_up = o.give_up.as_nanos() as u64;
    let last = last_deadlines(&o.tracked);
    let gone = last_gone(&o.tracked);
    let settle = MARKER_SETTLE.as_nanos() as u64;
    let owed: Vec<u32> = last
        .iter()
        .filter(|&(s, d)| {
            let Some(d) = *d else { return false };
            let all_gone = gone.get(s).copied().flatten();
            d + give_up <= m.until_ns || all_gone.is_some_and(|g| g + settle <= m.until_ns)
        })
        .map(|(&s, _)| s)
        .collect();
    let mut got: BTreeMap<u32, Vec<&MarkerSeen>> = BTreeMap::new();
    let mut problems = Vec::new();
    for seen in &m.seen {
        match (seen.subject, seen.reason.as_deref()) {
            (Some(s), Some(EXPIRY_REASON)) => got.entry(s).or_default().push(seen),
            (_, reason) => problems.push(format!(
                "sequence {} is no expiry marker (reason {reason:?})",
                seen.seq
            )),
        }
    }
    let missing: Vec<String> = owed
        .iter()
        .filter(|s| !got.contains_key(s))
        .map(|s| s.to_string())
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "the server wrote no marker for {} subjects: {}",
            missing.len(),
            shown(&missing)
        ));
    }
    for (s, markers) in &got {
        if !last.get(s).is_some_and(Option::is_some) {
            problems.push(format!(
                "a marker for subject {s}, which still holds a message"
            ));
        } else if markers.len() > 1 {
            problems.push(format!("{} markers for subject {s}", markers.len()));
        }
    }
    let detail = if problems.is_empty() {
        format!(
            "{} markers for the {} subjects whose messages all expired, reason {EXPIRY_REASON}",
            m.seen.len(),
            owed.len()
        )
    } else {
        problems.join("; ")
    };
    Invariant::check(MARKERS_ACCOUNTED, problems.is_empty(), detail)
}

/// A tolerance as the evidence states it: "180 µs".
fn micros(d: Duration) -> String {
    format!("{} µs", d.as_micros())
}

fn shown(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        text.push_str(", ...");
    }
    text
}

#[cfg(test)]
mod tests;
