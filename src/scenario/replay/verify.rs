//! A replay held to the recording: exactly the selected set, in stream
//! order, each delivery the recorded message, nothing left pending.

use std::collections::HashMap;

use super::OneReplay;
use crate::drive::DriveOutcome;
use crate::profile::ReplayReader;
use crate::replay::read::{Delivery, ReplayLog};
use crate::replay::recording::Recorded;
use crate::variant::{Invariant, VariantResult};

pub(super) fn verify(
    v: &OneReplay,
    log: &ReplayLog,
    expected: &[u64],
    recording: &[Recorded],
    live: Option<&DriveOutcome>,
    r: &mut VariantResult,
) {
    let d = &log.deliveries;
    let delivered: Vec<u64> = d.iter().map(|x| x.seq).collect();
    let first = |seqs: &[u64]| seqs.first().map_or("none".to_string(), u64::to_string);
    // A policy that selects nothing (`new` with nothing appended) leaves
    // the order and content checks nothing to look at.
    let nothing = expected.is_empty() && delivered.is_empty();
    let unless_nothing = |i: Invariant| match nothing {
        true => Invariant::not_applicable(
            &i.name,
            "the policy selected no message, and none was delivered",
        ),
        false => i,
    };
    r.invariants.push(unless_nothing(Invariant::check(
        "first message = the policy's first",
        delivered.first() == expected.first(),
        format!(
            "first delivered sequence {} (selected: {})",
            first(&delivered),
            first(expected)
        ),
    )));
    r.invariants.push(Invariant::equal(
        "count = selected count",
        delivered.len() as u64,
        expected.len() as u64,
    ));
    let out_of_order = delivered.windows(2).position(|w| w[1] <= w[0]);
    r.invariants.push(unless_nothing(Invariant::check(
        "in stream order",
        out_of_order.is_none(),
        match out_of_order {
            None => format!("{} deliveries, each after the one before", delivered.len()),
            Some(i) => format!(
                "delivery {} (sequence {}) came after sequence {}",
                i + 1,
                delivered[i + 1],
                delivered[i]
            ),
        },
    )));
    let (missing, extra) = difference(expected, &delivered);
    let lost_detail = if missing.is_empty() {
        format!("all {} selected messages delivered", expected.len())
    } else {
        format!(
            "{} of {} selected messages never delivered (first sequences: {:?})",
            missing.len(),
            expected.len(),
            &missing[..missing.len().min(10)]
        )
    };
    r.invariants.push(Invariant::check(
        "nothing lost",
        missing.is_empty(),
        lost_detail,
    ));
    r.ledger.lost = missing.len() as u64;
    r.invariants.push(Invariant::check(
        "nothing extra",
        extra.is_empty() && log.redelivered == 0,
        if extra.is_empty() && log.redelivered == 0 {
            "no delivery outside the selection, none twice".to_string()
        } else {
            format!(
                "{} deliveries outside the selection or repeated (first sequences: {:?}), {} \
                 marked redelivered",
                extra.len(),
                &extra[..extra.len().min(10)],
                log.redelivered
            )
        },
    ));
    let by_seq: HashMap<u64, &Recorded> = recording.iter().map(|m| (m.seq, m)).collect();
    let differing: Vec<u64> = d
        .iter()
        .filter(|x| by_seq.get(&x.seq).is_none_or(|m| !same_message(m, x)))
        .map(|x| x.seq)
        .collect();
    r.invariants.push(unless_nothing(Invariant::check(
        "each delivery is the recorded message",
        differing.is_empty() && log.malformed == 0,
        format!(
            "{} deliveries differ from the recording in timestamp or stamp (first: {:?}), {} \
             without a stamp",
            differing.len(),
            &differing[..differing.len().min(10)],
            log.malformed
        ),
    )));
    let (passed, detail) = match (v.reader, log.server_state, d.last()) {
        (ReplayReader::Pull, Some((pending, ack_pending)), _) => (
            pending == 0 && ack_pending == 0,
            format!("num_pending {pending}, num_ack_pending {ack_pending}"),
        ),
        (ReplayReader::Pull, None, _) => (false, "consumer info unavailable".to_string()),
        (ReplayReader::Ordered, _, Some(last)) => (
            last.pending == 0,
            format!("{} pending after the last delivery", last.pending),
        ),
        (ReplayReader::Ordered, _, None) => (
            true,
            "no delivery, none selected to report pending".to_string(),
        ),
    };
    r.invariants.push(Invariant::check(
        "server reports nothing pending",
        passed,
        detail,
    ));
    if let Some(o) = live {
        r.invariants
            .push(crate::scenario::checks::every_publish_persisted(
                "every live publish persisted",
                o,
            ));
    }
}

/// A delivery carries what was recorded under its sequence: the server's
/// timestamp and jsbench's stamp.
fn same_message(m: &Recorded, x: &Delivery) -> bool {
    m.published_ns == x.published_ns && m.origin == x.origin
}

/// (selected but not delivered, delivered but not selected or repeated),
/// both sorted.
fn difference(expected: &[u64], delivered: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut seen: HashMap<u64, u32> = HashMap::with_capacity(delivered.len());
    for &s in delivered {
        *seen.entry(s).or_default() += 1;
    }
    let mut missing = Vec::new();
    for s in expected {
        match seen.get_mut(s) {
            Some(n) if *n > 0 => *n -= 1,
            _ => missing.push(*s),
        }
    }
    let mut extra: Vec<u64> = seen
        .into_iter()
        .flat_map(|(s, n)| std::iter::repeat_n(s, n as usize))
        .collect();
    extra.sort_unstable();
    (missing, extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ReplayDeliver, ReplayPace};
    use crate::replay::read::End;
    use crate::scenario::replay::Live;

    #[test]
    fn differences_name_missing_extra_and_repeated_sequences() {
        assert_eq!(difference(&[1, 2, 3], &[1, 2, 3]), (vec![], vec![]));
        assert_eq!(
            difference(&[1, 2, 3, 4], &[1, 3, 3, 9]),
            (vec![2, 4], vec![3, 9])
        );
        assert_eq!(difference(&[], &[5]), (vec![], vec![5]));
    }

    /// A recording of sequences 1..=5 and a clean replay of 2..=5.
    fn clean() -> (Vec<Recorded>, Vec<u64>, ReplayLog) {
        let recording: Vec<Recorded> = (1..=5)
            .map(|seq| Recorded {
                seq,
                published_ns: 1_000 * seq,
                subject: 0,
                origin: seq,
                intended_ns: 0,
            })
            .collect();
        let expected = vec![2, 3, 4, 5];
        let deliveries = expected
            .iter()
            .map(|&seq| Delivery {
                seq,
                published_ns: 1_000 * seq,
                received_ns: 0,
                pending: 5 - seq,
                origin: seq,
            })
            .collect();
        let log = ReplayLog {
            requested_ns: 0,
            deliveries,
            bytes: 0,
            malformed: 0,
            redelivered: 0,
            errors: Vec::new(),
            end: End::Reached,
            server_state: Some((0, 0)),
            timeline: crate::record::timeline::Timeline::per_second(0),
        };
        (recording, expected, log)
    }

    /// The names of the invariants `verify` fails for `log`.
    fn failing(reader: ReplayReader, log: &ReplayLog) -> Vec<String> {
        let (recording, expected, _) = clean();
        let v = OneReplay {
            pace: ReplayPace::Instant,
            deliver: ReplayDeliver::ByStartSequence,
            reader,
            live: Live::No,
        };
        let mut r = VariantResult::new("t");
        verify(&v, log, &expected, &recording, None, &mut r);
        r.broken().into_iter().map(String::from).collect()
    }

    /// Each check fails on the fault it is for and on nothing else: the
    /// server cannot be made to break these on demand, so the deliveries
    /// are forged.
    #[test]
    fn each_replay_check_fails_on_its_own_fault() {
        let (_, _, log) = clean();
        assert!(failing(ReplayReader::Pull, &log).is_empty());
        assert!(failing(ReplayReader::Ordered, &log).is_empty());

        let mut wrong_start = clean().2;
        wrong_start.deliveries.insert(0, wrong_start.deliveries[0]);
        wrong_start.deliveries[0].seq = 1;
        wrong_start.deliveries[0].published_ns = 1_000;
        wrong_start.deliveries[0].origin = 1;
        assert_eq!(
            failing(ReplayReader::Pull, &wrong_start),
            [
                "first message = the policy's first",
                "count = selected count",
                "nothing extra"
            ]
        );

        let mut swapped = clean().2;
        swapped.deliveries.swap(1, 2);
        assert_eq!(failing(ReplayReader::Pull, &swapped), ["in stream order"]);

        let mut short = clean().2;
        short.deliveries.pop();
        short.deliveries[2].pending = 0;
        assert_eq!(
            failing(ReplayReader::Ordered, &short),
            ["count = selected count", "nothing lost"]
        );

        let mut marked = clean().2;
        marked.redelivered = 1;
        assert_eq!(failing(ReplayReader::Pull, &marked), ["nothing extra"]);

        let mut altered = clean().2;
        altered.deliveries[1].origin = 99;
        assert_eq!(
            failing(ReplayReader::Pull, &altered),
            ["each delivery is the recorded message"]
        );
        let mut retimed = clean().2;
        retimed.deliveries[1].published_ns += 1;
        assert_eq!(
            failing(ReplayReader::Pull, &retimed),
            ["each delivery is the recorded message"]
        );
        let mut unstamped = clean().2;
        unstamped.malformed = 1;
        assert_eq!(
            failing(ReplayReader::Pull, &unstamped),
            ["each delivery is the recorded message"]
        );

        let mut pending = clean().2;
        pending.server_state = Some((0, 1));
        assert_eq!(
            failing(ReplayReader::Pull, &pending),
            ["server reports nothing pending"]
        );
        pending.server_state = None;
        assert_eq!(
            failing(ReplayReader::Pull, &pending),
            ["server reports nothing pending"]
        );
        let mut behind = clean().2;
        behind.deliveries.last_mut().unwrap().pending = 3;
        assert_eq!(
            failing(ReplayReader::Ordered, &behind),
            ["server reports nothing pending"]
        );

        // A live publisher's publish the server did not persist.
        let (recording, expected, log) = clean();
        let mut live = DriveOutcome::empty();
        live.counts.published = 3;
        live.counts.persisted = 2;
        let v = OneReplay {
            pace: ReplayPace::Instant,
            deliver: ReplayDeliver::New,
            reader: ReplayReader::Pull,
            live: Live::New,
        };
        let mut r = VariantResult::new("t");
        verify(&v, &log, &expected, &recording, Some(&live), &mut r);
        assert_eq!(r.broken(), ["every live publish persisted"]);
    }
}
