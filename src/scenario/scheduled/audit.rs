//! What the firings say against what was due: each firing matched to the
//! due time it answers, errors measured from it, and the guarantees
//! checked. Pure: the run hands it what it watched and what the stream
//! held, and the tests hand it faults.

use std::collections::{BTreeMap, BTreeSet};

use crate::record::histogram::Recorder;
use crate::streams::schedules::{Firing, Next, Pattern};
use crate::variant::Invariant;

/// One published schedule and its first due time (Unix ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub index: u64,
    pub pattern: Pattern,
    pub first_ns: i128,
}

impl Due {
    /// Due times up to `cutoff_ns`: one for `@at`, every period for the
    /// repeating ones.
    fn count_until(&self, cutoff_ns: i128) -> u64 {
        if self.first_ns > cutoff_ns {
            return 0;
        }
        match self.pattern.period_ns() {
            None => 1,
            Some(p) => ((cutoff_ns - self.first_ns) / p) as u64 + 1,
        }
    }

    /// Which due time `f` answers (0 the first) and when it was due;
    /// `None` when it answers none (a repeating schedule's `Next` off its
    /// grid, an `@at` one without `purge`).
    fn answered(&self, f: &Firing) -> Option<(u64, i128)> {
        match (self.pattern.period_ns(), f.next) {
            (None, Next::Purge) => Some((0, self.first_ns)),
            (Some(p), Next::At(next)) => {
                let due = next - p;
                let offset = due - self.first_ns;
                (offset >= 0 && offset % p == 0).then(|| ((offset / p) as u64, due))
            }
            _ => None,
        }
    }
}

/// The firings against the due times.
#[derive(Debug, Default)]
pub struct Audit {
    /// Stored time minus due time, ns, of every firing matched.
    pub stored_error: Recorder,
    /// Received time minus due time, ns.
    pub received_error: Recorder,
    pub firings: u64,
    /// Firings of a due time already fired: (schedule, due index) twice.
    pub duplicates: u64,
    /// Firings stored before their due time, and the earliest by how much.
    pub early: u64,
    pub earliest_ns: i128,
    /// Firings that answer no due time of their schedule.
    pub off_grid: u64,
    /// Due times up to the cutoff.
    pub expected: u64,
    /// Of them, never received: the stream never held them (server), or
    /// held them and the watcher never had them (client).
    pub lost_server: u64,
    pub lost_client: u64,
    /// Earliest and latest stored time of the matched firings.
    pub first_stored_ns: Option<i128>,
    pub last_stored_ns: Option<i128>,
}

/// Audits `firings` against `dues`: due times after `cutoff_ns` are not
/// expected (their firings still count when they come). `held` is the
/// stream's count of messages per target subject, the server's record.
pub fn audit(
    dues: &[Due],
    firings: &[Firing],
    cutoff_ns: i128,
    held: &BTreeMap<u64, u64>,
) -> Audit {
    let by_index: BTreeMap<u64, &Due> = dues.iter().map(|d| (d.index, d)).collect();
    let mut a = Audit::default();
    let mut seen: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut received: BTreeMap<u64, u64> = BTreeMap::new();
    for f in firings {
        a.firings += 1;
        let Some((k, due)) = by_index.get(&f.index).and_then(|d| d.answered(f)) else {
            a.off_grid += 1;
            continue;
        };
        if !seen.insert((f.index, k)) {
            a.duplicates += 1;
            continue;
        }
        *received.entry(f.index).or_default() += 1;
        if f.stored_ns < due {
            a.early += 1;
            a.earliest_ns = a.earliest_ns.max(due - f.stored_ns);
        }
        a.stored_error
            .record(f.stored_ns.saturating_sub(due).max(0) as u64);
        a.received_error
            .record(f.received_ns.saturating_sub(due).max(0) as u64);
        a.first_stored_ns = a.first_stored_ns.into_iter().chain([f.stored_ns]).min();
        a.last_stored_ns = a.last_stored_ns.max(Some(f.stored_ns));
    }
    for d in dues {
        let expected = d.count_until(cutoff_ns);
        a.expected += expected;
        let missing = (0..expected)
            .filter(|k| !seen.contains(&(d.index, *k)))
            .count() as u64;
        if missing == 0 {
            continue;
        }
        // The stream held more for this schedule than the watcher had:
        // that many of the missing were the client's to lose.
        let got = received.get(&d.index).copied().unwrap_or(0);
        let client = held
            .get(&d.index)
            .copied()
            .unwrap_or(0)
            .saturating_sub(got)
            .min(missing);
        a.lost_client += client;
        a.lost_server += missing - client;
    }
    a
}

pub const ONCE: &str = "each due time fired once";
pub const NOT_EARLY: &str = "no firing stored before its due time";
pub const NONE_LOST: &str = "every due firing arrived";
pub const ON_GRID: &str = "every firing answers a due time of its schedule";
pub const PURGED: &str = "a fired @at schedule is removed";

impl Audit {
    /// The guarantees; `left` is the count of schedule messages the
    /// stream still holds after every `@at` one fired, `None` for
    /// repeating schedules (they stay by design).
    pub fn invariants(&self, left: Option<u64>) -> Vec<Invariant> {
        vec![
            Invariant::check(
                ONCE,
                self.duplicates == 0,
                format!(
                    "{} firing(s) repeated a due time already fired, of {}",
                    self.duplicates, self.firings
                ),
            ),
            Invariant::check(
                NOT_EARLY,
                self.early == 0,
                format!(
                    "{} early (the earliest by {} µs); the server's stored time against the \
                     due time, no tolerance: it fires only once its timer finds the due time \
                     passed",
                    self.early,
                    self.earliest_ns / 1_000
                ),
            ),
            Invariant::check(
                NONE_LOST,
                self.lost_server + self.lost_client == 0,
                format!(
                    "{} of {} due firings missing: {} never stored (server), {} stored but \
                     not received (client)",
                    self.lost_server + self.lost_client,
                    self.expected,
                    self.lost_server,
                    self.lost_client
                ),
            ),
            Invariant::check(
                ON_GRID,
                self.off_grid == 0,
                format!(
                    "{} of {} firings matched no due time (an @at without \
                     Nats-Schedule-Next: purge, or a repeating schedule's next time off \
                     its period)",
                    self.off_grid, self.firings
                ),
            ),
            match left {
                Some(n) => Invariant::check(
                    PURGED,
                    n == 0,
                    format!("{n} fired @at schedule(s) still stored"),
                ),
                None => Invariant::not_applicable(
                    PURGED,
                    "repeating schedules stay stored to fire again",
                ),
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: i128 = 1_000_000_000;

    fn at(index: u64, due: i128) -> Due {
        Due {
            index,
            pattern: Pattern::At(due),
            first_ns: due,
        }
    }

    fn fired(index: u64, stored: i128, next: Next) -> Firing {
        Firing {
            index,
            stream_seq: 0,
            stored_ns: stored,
            received_ns: stored + 1_000,
            next,
        }
    }

    fn every(index: u64) -> Due {
        Due {
            index,
            pattern: Pattern::Every(Duration::from_secs(1)),
            first_ns: 10 * S,
        }
    }

    fn failing(a: &Audit, left: Option<u64>) -> Vec<String> {
        a.invariants(left)
            .into_iter()
            .filter(|i| !i.passed)
            .map(|i| i.name)
            .collect()
    }

    fn clean() -> (Vec<Due>, Vec<Firing>, BTreeMap<u64, u64>) {
        let dues = vec![at(0, 10 * S), at(1, 11 * S)];
        let firings = vec![
            fired(0, 10 * S + 2_000_000, Next::Purge),
            fired(1, 11 * S + 3_000_000, Next::Purge),
        ];
        (dues, firings, BTreeMap::from([(0, 1), (1, 1)]))
    }

    #[test]
    fn a_clean_run_holds_everything_and_measures_from_the_due_time() {
        let (dues, firings, held) = clean();
        let a = audit(&dues, &firings, 20 * S, &held);
        assert!(failing(&a, Some(0)).is_empty());
        assert_eq!((a.firings, a.expected), (2, 2));
        assert_eq!(a.stored_error.count(), 2);
        let max = a.stored_error.quantile(1.0);
        assert!((2_990_000..=3_010_000).contains(&max), "{max}");
    }

    #[test]
    fn a_repeated_firing_fails_once() {
        let (dues, mut firings, held) = clean();
        firings.push(fired(1, 11 * S + 9_000_000, Next::Purge));
        let a = audit(&dues, &firings, 20 * S, &held);
        assert_eq!(failing(&a, Some(0)), [ONCE]);
    }

    #[test]
    fn an_early_firing_fails_not_early() {
        let (dues, mut firings, held) = clean();
        firings[0].stored_ns = 10 * S - 1;
        let a = audit(&dues, &firings, 20 * S, &held);
        assert_eq!(failing(&a, Some(0)), [NOT_EARLY]);
    }

    #[test]
    fn a_missing_firing_is_lost_by_the_server_or_the_client() {
        let (dues, firings, _) = clean();
        // Never stored: the server's.
        let a = audit(&dues, &firings[..1], 20 * S, &BTreeMap::from([(0, 1)]));
        assert_eq!(failing(&a, Some(0)), [NONE_LOST]);
        assert_eq!((a.lost_server, a.lost_client), (1, 0));
        // Stored, never received: the client's.
        let a = audit(
            &dues,
            &firings[..1],
            20 * S,
            &BTreeMap::from([(0, 1), (1, 1)]),
        );
        assert_eq!((a.lost_server, a.lost_client), (0, 1));
        // Due after the cutoff: not expected yet.
        let a = audit(&dues, &firings[..1], 10 * S + 5, &BTreeMap::new());
        assert!(failing(&a, Some(0)).is_empty());
    }

    #[test]
    fn repeating_firings_are_matched_by_their_next_time() {
        let dues = vec![every(0)];
        let firings = vec![
            fired(0, 10 * S + 5, Next::At(11 * S)),
            fired(0, 11 * S + 5, Next::At(12 * S)),
            fired(0, 12 * S + 5, Next::At(13 * S)),
        ];
        let a = audit(&dues, &firings, 12 * S + 500, &BTreeMap::from([(0, 3)]));
        assert!(failing(&a, None).is_empty());
        assert_eq!(a.expected, 3);
        // A missing middle firing is lost; one off the period is off grid.
        let a = audit(
            &dues,
            &[firings[0], firings[2]],
            12 * S + 500,
            &BTreeMap::from([(0, 2)]),
        );
        assert_eq!(failing(&a, None), [NONE_LOST]);
        let off = [fired(0, 10 * S + 5, Next::At(11 * S + 400))];
        let a = audit(&dues, &off, 10 * S + 10, &BTreeMap::from([(0, 1)]));
        assert_eq!(failing(&a, None), [NONE_LOST, ON_GRID]);
        // An @at firing without purge answers no due time either.
        let (dues, mut firings, held) = clean();
        firings[0].next = Next::Unreadable;
        let a = audit(&dues, &firings, 20 * S, &held);
        assert!(failing(&a, Some(0)).contains(&ON_GRID.to_string()));
    }

    #[test]
    fn a_fired_at_schedule_left_stored_fails_purged() {
        let (dues, firings, held) = clean();
        let a = audit(&dues, &firings, 20 * S, &held);
        assert_eq!(failing(&a, Some(2)), [PURGED]);
        let na = a.invariants(None).pop().unwrap();
        assert!(!na.applicable && na.passed);
    }
}
