//! The filtered scenario's guarantees, judged from what jsbench knows on
//! its own side (the set a filter selects, computed by
//! [`super::layout::due`]) against what the consumer saw (the ledger) and
//! what the server says it still holds (the drive's attribution).

use crate::drive::DriveOutcome;
use crate::record::ledger::{Event, SeqSet};
use crate::scenario::checks::{self, StreamCount};
use crate::variant::Invariant;

pub const DELIVERED_ONCE: &str = "every matching message delivered once";
pub const NOTHING_OUTSIDE: &str = "nothing outside the filter delivered";
pub const STREAM_KEPT: &str = "the stream kept what max_per_subject keeps";

/// How many sequences an invariant's evidence names at most.
const EXAMPLES: usize = 10;

/// Every due sequence delivered exactly once, and no delivery of a
/// sequence the filter does not select (or the stream no longer keeps),
/// from one pass over the sequences either names. A missing one is the
/// server's (never sent while the client asked, or gone from the stream)
/// or the client's (sent, still held, never seen), as the drive's
/// attribution says; `None` when the durable's state was unavailable.
pub fn verify(due: &SeqSet, o: &DriveOutcome) -> Vec<Invariant> {
    let last = o.ledger.max_seq().max(due.iter().last().unwrap_or(0));
    let (mut missing, mut twice, mut outside) = (Vec::new(), Vec::new(), Vec::new());
    for seq in 1..=last {
        match (due.contains(seq), o.ledger.count(seq, Event::Delivered)) {
            (true, 0) => missing.push(seq),
            (true, 1) | (false, 0) => {}
            (true, _) => twice.push(seq),
            (false, _) => outside.push(seq),
        }
    }
    // The first sequences of a list, as evidence.
    let first = |seqs: &[u64]| seqs[..seqs.len().min(EXAMPLES)].to_vec();
    // "<how many> <what> (first sequences: [...])"
    let some = |seqs: &[u64], what: &str| {
        format!("{} {what} (first sequences: {:?})", seqs.len(), first(seqs))
    };
    let due = due.len();
    let mut detail = Vec::new();
    if !missing.is_empty() {
        let who = match o.server_state.map(|_| &o.counts) {
            Some(a) => format!(
                "{} the server's (never delivered while the client kept asking, or gone from \
                 the stream), {} the client's (delivered, still held, never seen), {} unattributed",
                a.lost, a.client_dropped, a.unattributed
            ),
            None => "nobody's proven: the durable's state was unavailable".to_string(),
        };
        let what = format!("of {due} matching messages never delivered: {who}");
        detail.push(some(&missing, &what));
    }
    if !twice.is_empty() {
        detail.push(some(&twice, "delivered more than once"));
    }
    let once = detail.is_empty();
    if once {
        detail.push(format!("all {due} matching messages delivered, none twice"));
    }
    let outside_detail = match outside.is_empty() {
        true => format!("every delivery among the {due} sequences the filter selects"),
        false => format!(
            "{} sequence(s) delivered that the filter does not select (first: {:?})",
            outside.len(),
            first(&outside)
        ),
    };
    vec![
        Invariant::check(DELIVERED_ONCE, once, detail.join("; ")),
        Invariant::check(NOTHING_OUTSIDE, outside.is_empty(), outside_detail),
    ]
}

/// The stream holds as many messages as max_per_subject keeps of the fill
/// (`expected`, from [`super::layout::stored`]); `held` as its
/// info said, or why it could not be read.
pub fn stream_kept(held: &StreamCount, expected: u64, max_per_subject: u64) -> Invariant {
    let limit = match max_per_subject {
        0 => "no per-subject limit".to_string(),
        m => format!("max_msgs_per_subject {m}"),
    };
    let (passed, held) = match held {
        Ok(held) => (*held == expected, format!("{held} held,")),
        Err(e) => (false, format!("{};", checks::unread(e))),
    };
    let detail = format!("{held} {expected} expected under {limit}");
    Invariant::check(STREAM_KEPT, passed, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ledger::{LedgerCounts, LedgerShard};

    fn due(seqs: &[u64]) -> SeqSet {
        let mut s = SeqSet::default();
        for &q in seqs {
            s.insert(q);
        }
        s
    }

    fn delivered(seqs: &[u64]) -> LedgerShard {
        let mut l = LedgerShard::new();
        for &q in seqs {
            l.mark(q, Event::Delivered);
        }
        l
    }

    fn judge(due: &SeqSet, ledger: &LedgerShard, a: Option<&LedgerCounts>) -> Vec<Invariant> {
        let mut o = DriveOutcome::empty();
        o.ledger = ledger.clone();
        if let Some(a) = a {
            o.server_state = Some(Default::default());
            o.counts = *a;
        }
        verify(due, &o)
    }

    #[test]
    fn a_clean_consume_holds_both() {
        let d = due(&[1, 3, 5]);
        let all = judge(&d, &delivered(&[1, 3, 5]), None);
        assert!(all.iter().all(|i| i.passed), "{all:?}");
    }

    #[test]
    fn a_matching_message_never_delivered_fails_naming_the_server() {
        let d = due(&[1, 3, 5]);
        let a = LedgerCounts {
            lost: 1,
            ..Default::default()
        };
        let all = judge(&d, &delivered(&[1, 5]), Some(&a));
        let i = &all[0];
        assert!(!i.passed);
        assert!(i.detail.contains("1 of 3"), "{}", i.detail);
        assert!(i.detail.contains("1 the server's"), "{}", i.detail);
        assert!(i.detail.contains("[3]"), "{}", i.detail);
        assert!(all[1].passed);
    }

    #[test]
    fn a_message_the_client_dropped_fails_naming_the_client() {
        let a = LedgerCounts {
            client_dropped: 1,
            ..Default::default()
        };
        let i = &judge(&due(&[2]), &delivered(&[]), Some(&a))[0];
        assert!(!i.passed);
        assert!(i.detail.contains("1 the client's"), "{}", i.detail);
    }

    #[test]
    fn a_matching_message_delivered_twice_fails() {
        let mut l = delivered(&[1, 3]);
        l.mark(3, Event::Delivered);
        let i = &judge(&due(&[1, 3]), &l, None)[0];
        assert!(!i.passed);
        assert!(i.detail.contains("more than once"), "{}", i.detail);
    }

    #[test]
    fn a_delivery_outside_the_filter_fails() {
        let all = judge(&due(&[1, 3]), &delivered(&[1, 2, 3]), None);
        assert!(all[0].passed);
        assert!(!all[1].passed);
        assert!(all[1].detail.contains("[2]"), "{}", all[1].detail);
    }

    #[test]
    fn a_stream_keeping_other_than_max_per_subject_says_fails() {
        assert!(stream_kept(&Ok(30), 30, 3).passed);
        let i = stream_kept(&Ok(31), 30, 3);
        assert!(!i.passed && i.detail.contains("max_msgs_per_subject 3"));
    }

    /// A lookup that failed checks nothing: the check fails naming its
    /// error, never reads "not applicable".
    #[test]
    fn a_stream_whose_info_failed_fails_stream_kept_with_the_error() {
        let lookup = Err("reading stream JSB_F's info: no responders".to_string());
        let i = stream_kept(&lookup, 30, 0);
        assert!(i.applicable && !i.passed, "{i:?}");
        assert!(
            i.detail.contains("JSB_F's info: no responders"),
            "{}",
            i.detail
        );
    }
}
