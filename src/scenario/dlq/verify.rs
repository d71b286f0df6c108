//! The DLQ, the originals, the handler, checked.

use std::collections::{BTreeMap, BTreeSet};

use super::readback::Evidence;
use super::{Variant, WATCHED};
use crate::consume::SeenMessage;
use crate::consume::fates::Analysis;
use crate::dlq::audit::{self, Audit};
use crate::dlq::{Key, Outcome};
use crate::drive::DriveOutcome;
use crate::profile::Retention;
use crate::record::ledger::Event;
use crate::scenario::checks;
use crate::variant::{Invariant, VariantResult};

/// Every guarantee of a variant: the fates, the originals found gone, the
/// DLQ read back, the originals as the retention says, the handler (and
/// its restart), nothing left pending.
pub(super) fn verify(
    o: &DriveOutcome,
    a: &Analysis,
    e: &Evidence,
    v: &Variant,
    r: &mut VariantResult,
) {
    checks::fate_invariants(o, a, r);
    originals_gone(o, &e.gone, r);
    let audit = audit_dlq(o, e, v.retention);
    dlq_invariants(&audit, e.expected.len(), r);
    r.invariants.push(originals_as_retained(o, e, v.retention));
    handler_invariants(e, r);
    if let Some(n) = v.restart_after {
        r.invariants.push(restarted_handler(n, e, &audit));
    }
    r.invariants.push(checks::nothing_pending(o));
}

/// The DLQ read back and held to its originals; an error when the DLQ or
/// the originals could not be read whole.
fn audit_dlq(o: &DriveOutcome, e: &Evidence, retention: Retention) -> Result<Audit, String> {
    let letters = match &e.contents {
        Ok(contents) if contents.complete => contents.letters.as_slice(),
        Ok(contents) => {
            return Err(format!(
                "the DLQ stream could not be read to its end ({} read)",
                contents.letters.len()
            ));
        }
        Err(err) => return Err(format!("{err:#}")),
    };
    let now = e.now.as_ref().map_err(|err| err.clone())?;
    // As the stream holds them now, but on a work queue: the copy is held
    // to the stored original, not to the handler's own reading of it.
    let stored = now.iter().filter(|_| retention != Retention::Workqueue);
    let mut originals: BTreeMap<Key, SeenMessage> = stored
        .filter_map(|(seq, m)| m.as_ref().map(|m| ((WATCHED, *seq), audit::stored(m))))
        .collect();
    // Otherwise as the consumer saw them at delivery: a work queue's are
    // deleted once copied, and a stream's limits may evict others after
    // their copy was made; a copy is held to what the consumer saw, not to
    // what the handler itself read before deleting.
    for m in o.consumers.iter().flat_map(|c| &c.doomed) {
        originals
            .entry((WATCHED, m.seq))
            .or_insert_with(|| m.clone());
    }
    Ok(audit::check(
        letters,
        &e.expected,
        &originals,
        &e.pipeline.spec,
    ))
}

/// The originals, as the retention says: kept (limits), deleted once
/// copied (work queue), kept until every consumer acks (interest).
fn originals_as_retained(o: &DriveOutcome, e: &Evidence, retention: Retention) -> Invariant {
    let (c, expected) = (&o.counts, &e.expected);
    let stored = &e.stored;
    let name = match retention {
        Retention::Limits => "limits: originals remain",
        Retention::Workqueue => "workqueue: originals deleted once copied",
        Retention::Interest => "interest: originals remain until every consumer acks",
    };
    let now = match &e.now {
        Ok(now) => now,
        // Unreadable originals fail the retention's own check.
        Err(err) => {
            let detail = format!("the originals could not be read: {err}");
            return Invariant::check(name, false, detail);
        }
    };
    let present = now.values().filter(|m| m.is_some()).count();
    match retention {
        Retention::Limits => {
            // Unless the stream's limits evicted them, before the handler
            // read them or after.
            let first_kept = o.eviction.as_ref().map_or(0, |ev| ev.first_kept);
            let evicted = now
                .iter()
                .filter(|(seq, m)| m.is_none() && **seq < first_kept)
                .count();
            Invariant::check(
                name,
                present + evicted == now.len() && *stored == Ok(c.persisted - c.evicted),
                format!(
                    "{present} of {} dead-lettered originals still readable, {evicted} evicted by the \
                     stream's limits; the stream holds {} of {} messages ({} evicted)",
                    now.len(),
                    checks::shown(stored),
                    c.persisted,
                    c.evicted
                ),
            )
        }
        Retention::Workqueue => Invariant::check(
            name,
            present == 0 && *stored == Ok(0),
            format!(
                "{present} of {} dead-lettered originals still readable; the stream holds {} messages (acked ones are removed by the server, dead-lettered ones by the handler)",
                expected.len(),
                checks::shown(stored)
            ),
        ),
        Retention::Interest => interest_originals(o, e, (name, present)),
    }
}

/// An interest stream keeps a dead-lettered original while the other
/// consumer has not acked it; once both have, the server removes it.
fn interest_originals(o: &DriveOutcome, e: &Evidence, (name, present): (&str, usize)) -> Invariant {
    let (c, expected) = (&o.counts, &e.expected);
    let stored = &e.stored;
    let other = match &e.other {
        Some(Ok(report)) => {
            let acked = (1..=o.ledger.max_seq())
                .filter(|&s| {
                    o.ledger.count(s, Event::Persisted) > 0
                        && report.ledger.count(s, Event::Acked) > 0
                })
                .count() as u64;
            Ok(acked)
        }
        Some(Err(err)) => Err(err.clone()),
        None => Err("the other consumer did not run".into()),
    };
    let acked = other.as_ref().copied().unwrap_or(0);
    Invariant::check(
        name,
        present == expected.len() && *stored == Ok(expected.len() as u64) && acked == c.persisted,
        match other {
            Ok(acked) => format!(
                "the other consumer acked {acked} of {}; {present} of {} dead-lettered originals still readable; the stream holds {} messages (the acked-by-both are removed)",
                c.persisted,
                expected.len(),
                checks::shown(stored)
            ),
            Err(err) => format!("the other consumer: {err}"),
        },
    )
}

/// The handler heard one advisory per dead letter (its original found or
/// gone) and answered every one.
fn handler_invariants(e: &Evidence, r: &mut VariantResult) {
    let p = &e.pipeline;
    let advised: BTreeSet<Key> = p.stories().keys().copied().collect();
    let wanted: BTreeSet<Key> = (e.expected.keys())
        .copied()
        .chain(e.gone.iter().map(|&seq| (WATCHED, seq)))
        .collect();
    let missing = wanted.difference(&advised).count();
    let extra = advised.difference(&wanted).count();
    r.invariants.push(Invariant::check(
        "one advisory per dead letter, others skipped",
        missing == 0 && extra == 0,
        format!(
            "advisories for {} of {} dead letters, {extra} for other messages of the watched consumer; {} about other streams or consumers skipped, {} malformed termed",
            wanted.len() - missing,
            wanted.len(),
            p.count(|o| matches!(o, Outcome::Foreign)),
            p.count(|o| matches!(o, Outcome::Malformed(_)))
        ),
    ));
    r.invariants.push(Invariant::check(
        "the handler answered every advisory",
        p.errors.is_empty() && p.handler_state == Some((0, 0)),
        match p.handler_state {
            Some((pending, ack_pending)) => format!(
                "handler durable: num_pending {pending}, num_ack_pending {ack_pending}{}",
                if p.errors.is_empty() {
                    String::new()
                } else {
                    format!("; {}", p.errors.join("; "))
                }
            ),
            None => format!("handler durable info unavailable; {}", p.errors.join("; ")),
        },
    ));
}

/// A handler killed after copy `n`, before its delete and ack: the
/// advisory comes back to a new handler, and the DLQ still holds the
/// letter once (its second copy flagged duplicate by the server).
fn restarted_handler(n: u64, e: &Evidence, audit: &Result<Audit, String>) -> Invariant {
    let p = &e.pipeline;
    let killed: Vec<(u64, bool)> = p
        .attempts()
        .filter_map(|at| match at.outcome {
            Outcome::Killed { .. } => at.watched.map(|w| (at.seq, w == WATCHED)),
            _ => None,
        })
        .collect();
    let (passed, detail) = match killed.as_slice() {
        [(seq, true)] => {
            let story = p
                .stories()
                .get(&(WATCHED, *seq))
                .copied()
                .unwrap_or_default();
            let once = audit
                .as_ref()
                .is_ok_and(|a| !a.missing.contains(seq) && !a.repeated.iter().any(|x| x.0 == *seq));
            let passed = p.restarts() == 1 && story.deliveries >= 2 && story.done && once;
            (
                passed,
                format!(
                    "killed after copy {n} (sequence {seq}), before its delete and ack; a new handler got the advisory again ({} deliveries, {} copies published, {} flagged duplicate); the DLQ holds it {}",
                    story.deliveries,
                    story.published,
                    story.duplicates,
                    if once { "once" } else { "not exactly once" }
                ),
            )
        }
        [] => (
            false,
            format!(
                "no restart: the handler made fewer than {n} copies ({} dead letters)",
                e.expected.len()
            ),
        ),
        more => (false, format!("{} kills, expected one", more.len())),
    };
    Invariant::check(
        "a restarted handler still dead-letters exactly once",
        passed,
        detail,
    )
}

fn dlq_invariants(audit: &Result<Audit, String>, expected: usize, r: &mut VariantResult) {
    let names = [
        "every dead letter in the DLQ exactly once",
        "copies hold the original payload and headers",
        "no other message in the DLQ",
    ];
    let checks = match audit {
        Err(err) => names.map(|_| (false, err.clone())),
        Ok(a) => {
            let repeated: Vec<String> = (a.repeated.iter())
                .map(|(s, n)| format!("{s} x{n}"))
                .collect();
            [
                (
                    a.missing.is_empty() && a.repeated.is_empty() && a.once == expected as u64,
                    format!(
                        "{} of {expected} found once; missing {}; more than once {}",
                        a.once,
                        listed(&a.missing),
                        listed(&repeated)
                    ),
                ),
                (
                    a.mismatched_count == 0,
                    if a.mismatched_count == 0 {
                        format!(
                            "{} copies equal their original, publish-control headers dropped, origin headers added",
                            a.compared
                        )
                    } else {
                        format!("{} differ: {}", a.mismatched_count, a.mismatched.join("; "))
                    },
                ),
                (
                    a.unexpected_count == 0,
                    if a.unexpected_count == 0 {
                        format!("{} messages in the DLQ, all dead letters", a.letters)
                    } else {
                        format!("{} others: {}", a.unexpected_count, a.unexpected.join("; "))
                    },
                ),
            ]
        }
    };
    for (name, (passed, detail)) in names.into_iter().zip(checks) {
        r.invariants.push(Invariant::check(name, passed, detail));
    }
}

fn listed<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = items.iter().take(10).map(|i| i.to_string()).collect();
    if items.len() > 10 {
        format!("{} and {} more", shown.join(", "), items.len() - 10)
    } else {
        shown.join(", ")
    }
}

/// The delivery article's warning, measured: a dead letter whose original a stream
/// limit evicted before the handler read it cannot be copied; the handler
/// terms its advisory and the letter is lost. Every original the handler
/// found gone must lie below the first sequence the stream kept.
pub(super) fn originals_gone(o: &DriveOutcome, gone: &BTreeSet<u64>, r: &mut VariantResult) {
    const NAME: &str = "originals found gone were evicted by the stream's limits";
    r.count("dead_letters.lost_to_eviction", gone.len() as u64);
    if gone.is_empty() {
        r.invariants.push(Invariant::not_applicable(
            NAME,
            "the handler found every original it looked for",
        ));
        return;
    }
    let first_kept = o.eviction.as_ref().map(|e| e.first_kept);
    let unexplained: Vec<u64> = gone
        .iter()
        .copied()
        .filter(|&s| first_kept.is_none_or(|f| s >= f))
        .collect();
    r.warnings.push(format!(
        "{} dead letters lost: the stream's limits evicted their originals before the handler \
         read them (the handler termed their advisories)",
        gone.len()
    ));
    r.invariants.push(Invariant::check(
        NAME,
        unexplained.is_empty(),
        match first_kept {
            Some(f) => format!(
                "{} originals gone, {} of them below the first sequence the stream kept ({f}); \
                 not evicted: {:?}",
                gone.len(),
                gone.len() - unexplained.len(),
                &unexplained[..unexplained.len().min(5)]
            ),
            None => format!(
                "{} originals gone, and the stream has no limit that evicts: {:?}",
                gone.len(),
                &unexplained[..unexplained.len().min(5)]
            ),
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gone check with the stream's side forged: an original the
    /// handler found gone though the stream kept everything from below it,
    /// or though the stream has no limit that evicts.
    #[test]
    fn an_original_gone_without_an_eviction_fails_its_check() {
        let gone = BTreeSet::from([5]);
        let check = |first_kept: Option<u64>| {
            let mut o = DriveOutcome::settled(10);
            o.eviction = first_kept.map(|first_kept| crate::streams::readback::Eviction {
                limits: vec!["max_msgs 5".into()],
                reached: vec!["max_msgs 5: holds 5".into()],
                evicted: first_kept - 1,
                first_kept,
                held: 5,
            });
            let mut r = VariantResult::new("v");
            originals_gone(&o, &gone, &mut r);
            r.broken().into_iter().map(String::from).collect::<Vec<_>>()
        };
        assert!(check(Some(6)).is_empty());
        let name = "originals found gone were evicted by the stream's limits";
        assert_eq!(check(Some(3)), [name]);
        assert_eq!(check(None), [name]);
    }
}
