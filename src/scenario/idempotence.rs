//! Idempotent consumers: handlers that apply each message's work by
//! creating its key in a dedup store (a key-value bucket every client of
//! the durable shares, as a database outside any one process would be), so
//! a redelivered message whose work was done finds its key and is
//! suppressed. What the store cost and the check that no work was
//! applied twice, for every scenario that offers it (the scope provisions
//! the store: [`super::Scope::kv`]).

use crate::consume::Effects;
use crate::drive::DriveOutcome;
use crate::record::metrics::Direction;
use crate::variant::{Invariant, VariantResult};

/// The effects' figures and, with a store (`store`: bytes and keys as its
/// stream info gave them, or why it could not be read), the check that
/// every message's work was applied once.
pub fn measure(o: &DriveOutcome, store: Option<Result<(u64, u64), String>>, r: &mut VariantResult) {
    let e = effects(o);
    let size = store.as_ref().and_then(|s| s.as_ref().ok()).copied();
    measure_effects(&e, size, r);
    verify_effects(o, &e, store.map(|s| s.map(|(_, keys)| keys)), r);
}

/// What every client's work did, together.
fn effects(o: &DriveOutcome) -> Effects {
    let mut all = Effects::default();
    for c in &o.consumers {
        all.merge(&c.effects);
    }
    all
}

/// Work applied twice, and what the dedup store cost: its check per
/// delivery and its size per key (`store`: bytes and keys, when idempotent).
fn measure_effects(e: &Effects, store: Option<(u64, u64)>, r: &mut VariantResult) {
    r.count("work_done_twice", e.applied_twice());
    r.count("work_suppressed", e.suppressed);
    r.latency("dedup_check", &e.check);
    if let Some((bytes, keys)) = store.filter(|s| s.1 > 0) {
        let per_key = bytes as f64 / keys as f64;
        r.metric("dedup_store_bytes_per_key", "B", per_key, Direction::Lower);
    }
}

/// An idempotent consumer's promise: each message's work applied exactly
/// once, crash or not. The store's keys are the record of what was
/// applied: a handler killed between its key's creation and its report
/// applied the work without saying so (a crash mid-work does that), and
/// its redelivery is then rightly suppressed. `keys`: the store's key
/// count or why its info could not be read, `None` without a store.
fn verify_effects(
    o: &DriveOutcome,
    e: &Effects,
    keys: Option<Result<u64, String>>,
    r: &mut VariantResult,
) {
    let name = "every message's work applied once";
    let keys = match keys {
        Some(Ok(keys)) => keys,
        Some(Err(e)) => {
            let detail = format!("the dedup store's keys could not be counted: {e}");
            r.invariants.push(Invariant::check(name, false, detail));
            return;
        }
        None => {
            r.invariants.push(Invariant::not_applicable(
                name,
                "handlers without a dedup store: work done again is applied again (work_done_twice)",
            ));
            return;
        }
    };
    let twice = e.applied_twice();
    r.invariants.push(Invariant::check(
        name,
        twice == 0 && keys == o.counts.persisted && e.store_errors == 0,
        format!(
            "the store holds {keys} keys for {} messages; handlers reported {} applied \
             ({twice} more than once) and {} repeats suppressed; {} store errors",
            o.counts.persisted,
            e.applied.len(),
            e.suppressed,
            e.store_errors
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The idempotent check with the effects forged: a message's work
    /// applied twice, and one whose key the store lacks.
    #[test]
    fn work_applied_twice_or_never_fails_the_idempotent_check() {
        let mut o = DriveOutcome::settled(3);
        o.counts.persisted = 3;
        let failing = |e: &Effects, keys: u64| {
            let mut r = VariantResult::new("t");
            verify_effects(&o, e, Some(Ok(keys)), &mut r);
            r.broken().into_iter().map(String::from).collect::<Vec<_>>()
        };
        let once = Effects {
            applied: vec![1, 2, 3],
            suppressed: 1,
            ..Default::default()
        };
        assert!(failing(&once, 3).is_empty());
        let twice = Effects {
            applied: vec![1, 2, 3, 2],
            ..Default::default()
        };
        assert_eq!(twice.applied_twice(), 1);
        assert_eq!(failing(&twice, 3), ["every message's work applied once"]);
        // A key missing from the store: one message's work never applied.
        assert_eq!(failing(&once, 2), ["every message's work applied once"]);
    }

    /// A store whose info could not be read checks nothing: the check
    /// fails naming the lookup's error, never reads "not applicable".
    #[test]
    fn a_store_that_could_not_be_read_fails_the_idempotent_check_with_its_error() {
        let mut o = DriveOutcome::settled(3);
        o.counts.persisted = 3;
        let mut r = VariantResult::new("t");
        let lookup = "reading stream KV_x's info: timed out".to_string();
        measure(&o, Some(Err(lookup)), &mut r);
        let check = &r.invariants[0];
        assert!(check.applicable && !check.passed, "{check:?}");
        assert!(check.detail.contains("KV_x's info: timed out"), "{check:?}");
    }
}
