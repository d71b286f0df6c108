//! A copy checked against its origins: every message an origin stored is
//! in the copy once, nothing else is, and (per origin) the copy holds them
//! in the origin's order. Pure: fed what the watchers saw, so the unit
//! tests below can forge what no server does on demand (a copy out of
//! order).

use std::collections::{BTreeMap, BTreeSet};

use super::watch::Copied;
use crate::scenario::checks::StreamCount;
use crate::variant::Invariant;

pub const ONCE: &str = "every origin message in the copy once";
pub const ORDER: &str = "copy in origin order";
pub const COUNT: &str = "copy holds as many messages as the origins stored";
pub const DRAINED: &str = "work-queue origin drained by the flow-control acks";
pub use crate::scenario::checks::PERSISTED;

/// Sequences named in evidence at most.
const NAMED: usize = 5;

/// What a copy held against what its origins stored.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyAudit {
    /// Messages the origins stored (PubAck or republish), all told.
    pub expected: u64,
    /// Per origin: sequences stored there and never in the copy.
    pub missing: Vec<(usize, Vec<u64>)>,
    /// (origin, sequence) held by the copy more than once.
    pub twice: Vec<(usize, u64)>,
    /// Copy sequences from no origin of the variant, or of a sequence the
    /// origin never stored.
    pub strangers: Vec<u64>,
    /// Copy sequences that came after a later message of their origin.
    pub out_of_order: Vec<u64>,
}

impl CopyAudit {
    pub fn missing_count(&self) -> u64 {
        self.missing.iter().map(|(_, s)| s.len() as u64).sum()
    }
}

/// `stored`: per origin, every sequence it stored; `copied`: the copy in
/// its own order.
pub fn audit(stored: &[BTreeSet<u64>], copied: &[Copied]) -> CopyAudit {
    let mut seen: Vec<BTreeMap<u64, u32>> = vec![BTreeMap::new(); stored.len()];
    let mut highest: Vec<u64> = vec![0; stored.len()];
    let mut out = CopyAudit {
        expected: stored.iter().map(|s| s.len() as u64).sum(),
        ..CopyAudit::default()
    };
    for c in copied {
        let Some(o) = c.origin.filter(|&o| o < stored.len()) else {
            out.strangers.push(c.copy_seq);
            continue;
        };
        if !stored[o].contains(&c.origin_seq) {
            out.strangers.push(c.copy_seq);
            continue;
        }
        let n = seen[o].entry(c.origin_seq).or_insert(0);
        *n += 1;
        if *n == 2 {
            out.twice.push((o, c.origin_seq));
        }
        if c.origin_seq < highest[o] && *n == 1 {
            out.out_of_order.push(c.copy_seq);
        }
        highest[o] = highest[o].max(c.origin_seq);
    }
    for (o, seqs) in stored.iter().enumerate() {
        let gone: Vec<u64> = seqs
            .iter()
            .filter(|s| !seen[o].contains_key(s))
            .copied()
            .collect();
        if !gone.is_empty() {
            out.missing.push((o, gone));
        }
    }
    out
}

fn first<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let v: Vec<String> = items
        .into_iter()
        .take(NAMED)
        .map(|s| s.to_string())
        .collect();
    v.join(", ")
}

/// The copy's invariants. `origin_holds`: of the missing, how many the
/// origin still holds (the copying never fetched them) against how many
/// it no longer does (acknowledged to the copy, then lost); `names`: the
/// origins' stream names; `copy_count`: what the copy's stream info
/// says it holds.
pub fn invariants(
    a: &CopyAudit,
    names: &[String],
    origin_holds: Option<u64>,
    copy_count: &StreamCount,
) -> Vec<Invariant> {
    let missing = a.missing_count();
    let mut problems = Vec::new();
    if missing > 0 {
        let listed: Vec<String> = a
            .missing
            .iter()
            .map(|(o, seqs)| format!("{} seqs {}", names[*o], first(seqs)))
            .collect();
        let whose = match origin_holds {
            Some(held) if held == missing => {
                "the origin still holds them: the copying never stored them".to_string()
            }
            Some(held) => format!(
                "the origin still holds {held}; {} are gone from it too: lost by the server \
                 between origin and copy",
                missing - held
            ),
            None => "lost by the server between origin and copy".to_string(),
        };
        problems.push(format!(
            "{missing} of {} never stored in the copy ({}; {whose})",
            a.expected,
            listed.join("; ")
        ));
    }
    if !a.twice.is_empty() {
        problems.push(format!(
            "{} stored twice ({})",
            a.twice.len(),
            first(
                a.twice
                    .iter()
                    .map(|(o, s)| format!("{} seq {s}", names[*o]))
            )
        ));
    }
    if !a.strangers.is_empty() {
        problems.push(format!(
            "{} from no message the origins stored (copy seqs {})",
            a.strangers.len(),
            first(&a.strangers)
        ));
    }
    // A failed lookup checks nothing, and says so as a failure.
    let count = match copy_count {
        Ok(n) => Invariant::equal(COUNT, *n, a.expected),
        Err(e) => Invariant::check(
            COUNT,
            false,
            format!(
                "the copy's count could not be read: {e} ({} expected)",
                a.expected
            ),
        ),
    };
    // A mirror keeps the origin's sequences; a source copies each origin
    // in its order (it retries from the first sequence it missed, never
    // skips ahead).
    let late = (!a.out_of_order.is_empty()).then(|| {
        format!(
            "{} stored after a later message of their origin (copy seqs {})",
            a.out_of_order.len(),
            first(&a.out_of_order)
        )
    });
    let once = format!(
        "{} origin messages, each stored once in the copy",
        a.expected
    );
    let order = "each origin's messages in the copy in the origin's sequence order";
    vec![
        judged(ONCE, problems, once),
        count,
        judged(ORDER, late.into_iter().collect(), order.into()),
    ]
}

/// Passed, saying `fine`, when there are no `problems`; failed, naming
/// them all, when there are.
fn judged(name: &str, problems: Vec<String>, fine: String) -> Invariant {
    let passed = problems.is_empty();
    let detail = if passed { fine } else { problems.join("; ") };
    Invariant::check(name, passed, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copied(seqs: &[(usize, u64)]) -> Vec<Copied> {
        seqs.iter()
            .enumerate()
            .map(|(i, &(o, s))| Copied {
                copy_seq: i as u64 + 1,
                origin: Some(o),
                origin_seq: s,
                stored_ns: 0,
                received_ns: 0,
                sent_ns: None,
            })
            .collect()
    }

    fn state(inv: &[Invariant], name: &str) -> (bool, bool, String) {
        let i = inv.iter().find(|i| i.name == name).unwrap();
        (i.passed, i.applicable, i.detail.clone())
    }

    fn names() -> Vec<String> {
        vec!["A".into(), "B".into()]
    }

    #[test]
    fn a_whole_copy_in_order_holds_every_check() {
        let stored = [BTreeSet::from([1, 2, 3]), BTreeSet::from([1, 2])];
        let a = audit(&stored, &copied(&[(0, 1), (1, 1), (0, 2), (1, 2), (0, 3)]));
        let inv = invariants(&a, &names(), Some(0), &Ok(5));
        assert!(inv.iter().all(|i| i.passed), "{inv:?}");
    }

    #[test]
    fn a_copy_out_of_order_fails_order_but_not_once() {
        let stored = [BTreeSet::from([1, 2, 3])];
        let a = audit(&stored, &copied(&[(0, 1), (0, 3), (0, 2)]));
        let inv = invariants(&a, &names(), None, &Ok(3));
        let (passed, _, detail) = state(&inv, ORDER);
        assert!(!passed && detail.contains("copy seqs 3"), "{detail}");
        assert!(state(&inv, ONCE).0);
    }

    /// A copy whose count cannot be read fails its count check, naming
    /// the lookup's error.
    #[test]
    fn a_copy_whose_info_failed_fails_the_count_with_the_error() {
        let stored = [BTreeSet::from([1, 2, 3])];
        let a = audit(&stored, &copied(&[(0, 1), (0, 2), (0, 3)]));
        let lookup = Err("reading stream JSB_COPY's info: timed out".to_string());
        let inv = invariants(&a, &names(), None, &lookup);
        let (passed, applicable, detail) = state(&inv, COUNT);
        assert!(!passed && applicable, "{detail}");
        assert!(detail.contains("JSB_COPY's info: timed out"), "{detail}");
    }

    #[test]
    fn missing_twice_and_strangers_are_named_with_who_lost_them() {
        let stored = [BTreeSet::from([1, 2, 3, 4]), BTreeSet::from([1])];
        let mut c = copied(&[(0, 1), (0, 1), (0, 9), (1, 1)]);
        c.push(Copied {
            origin: None,
            ..c[0]
        });
        let a = audit(&stored, &c);
        assert_eq!(a.missing, vec![(0, vec![2, 3, 4])]);
        assert_eq!(a.twice, vec![(0, 1)]);
        assert_eq!(a.strangers, vec![3, 1]);
        let inv = invariants(&a, &names(), Some(1), &Ok(5));
        let (passed, _, detail) = state(&inv, ONCE);
        assert!(!passed);
        for needle in [
            "3 of 5 never stored",
            "A seqs 2, 3, 4",
            "still holds 1; 2 are gone from it too",
            "1 stored twice (A seq 1)",
            "2 from no message",
        ] {
            assert!(detail.contains(needle), "{needle}: {detail}");
        }
        // Five held for five stored: the count alone cannot tell.
        assert!(state(&inv, COUNT).0);
        let inv = invariants(&a, &names(), Some(3), &Ok(5));
        assert!(
            state(&inv, ONCE)
                .2
                .contains("the copying never stored them")
        );
    }
}
