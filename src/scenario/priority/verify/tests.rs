//! Each check fed a run with the violation it exists to catch, and one
//! without.

use super::*;

const MS: u64 = 1_000_000;
/// The profile's default `expires`: a grace of the full 250 ms.
const SECOND: Duration = Duration::from_secs(1);

fn d(client: usize, cseq: u64, sseq: u64, pin: Option<u16>) -> GroupDelivery {
    GroupDelivery {
        client,
        received_ns: cseq * MS,
        stream_seq: sseq,
        consumer_seq: cseq,
        delivered: 1,
        pending: 0,
        pin,
        intended_ns: 0,
        acked: true,
    }
}

fn pinned(at_ms: u64, id: &str) -> PinEvent {
    PinEvent {
        received_ns: at_ms * MS,
        change: PinChange::Pinned { id: id.into() },
    }
}

fn unpinned(at_ms: u64, reason: &str) -> PinEvent {
    PinEvent {
        received_ns: at_ms * MS,
        change: PinChange::Unpinned {
            reason: reason.into(),
        },
    }
}

fn pull(client: usize, sent_ms: u64, end: PullEnd) -> PullRecord {
    PullRecord {
        client,
        sent_ns: sent_ms * MS,
        end,
    }
}

#[test]
fn a_persisted_message_never_acked_is_lost_and_the_loser_is_named() {
    let mut ledger = LedgerShard::new();
    for seq in 1..=3 {
        ledger.mark(seq, Event::Persisted);
    }
    ledger.mark(1, Event::Delivered);
    ledger.mark(1, Event::Acked);
    let held = nothing_lost(&ledger, &[]);
    assert!(!held.passed);
    assert!(
        held.detail
            .contains("lost by the server: 2 never delivered"),
        "{}",
        held.detail
    );
    ledger.mark(2, Event::Delivered);
    let mut killed = d(1, 2, 2, Some(0));
    killed.acked = false;
    let one = nothing_lost(&ledger, &[killed]);
    assert!(!one.passed);
    assert!(
        one.detail.contains(
            "lost by a client: 1 delivered but never acked (first 2, delivered to clients [1])"
        ),
        "{}",
        one.detail
    );
    ledger.mark(2, Event::Acked);
    ledger.mark(3, Event::Delivered);
    ledger.mark(3, Event::Acked);
    assert!(nothing_lost(&ledger, &[]).passed);
}

#[test]
fn deliveries_outside_the_pin_are_counted_in_the_servers_order() {
    let clean = [
        d(0, 1, 1, Some(0)),
        d(0, 2, 2, Some(0)),
        d(1, 3, 3, Some(1)),
    ];
    assert!(within_pin(&clean).passed);
    // An old pin's delivery after the new pin's first; one to a client
    // under another's pin; one without a pin.
    let late = [
        d(0, 1, 1, Some(0)),
        d(1, 2, 2, Some(1)),
        d(0, 3, 3, Some(0)),
    ];
    assert_eq!(outside_pin(&late).len(), 1);
    let borrowed = [d(0, 1, 1, Some(0)), d(1, 2, 2, Some(0))];
    assert_eq!(outside_pin(&borrowed).len(), 1);
    let bare = [d(0, 1, 1, None)];
    let check = within_pin(&bare);
    assert!(
        !check.passed && check.detail.starts_with("1 of 1"),
        "{}",
        check.detail
    );
    // Read out of order, still judged by consumer sequence.
    let shuffled = [
        d(1, 3, 3, Some(1)),
        d(0, 1, 1, Some(0)),
        d(0, 2, 2, Some(0)),
    ];
    assert!(within_pin(&shuffled).passed);
}

#[test]
fn a_double_delivery_not_held_by_the_killed_client_fails() {
    let kill = Some((0, 500 * MS));
    let mut held = d(0, 1, 1, Some(0));
    held.acked = false;
    let ok = [held, d(1, 5, 1, Some(1))];
    assert!(doubles_explained(&ok, kill).passed);
    assert_eq!(doubles(&ok, kill), (vec![1], vec![]));
    // Acked long before the kill, delivered again to another.
    let bad = [d(0, 1, 1, Some(0)), d(1, 600, 1, Some(1))];
    let check = doubles_explained(&bad, kill);
    assert!(!check.passed, "{}", check.detail);
    assert!(
        check
            .detail
            .contains("client 0 (delivery 1, acked), then client 1"),
        "{}",
        check.detail
    );
    // Unacked but by a client nobody killed.
    assert!(!doubles_explained(&ok, Some((2, 500 * MS))).passed);
    assert!(!doubles_explained(&ok, None).passed);
}

/// The pinned-client checks' priority_timeout.
const TIMEOUT_NS: u64 = 2_000 * MS;

fn pin_run(
    deliveries: &[GroupDelivery],
    pulls: &[PullRecord],
    events: &[PinEvent],
    unpin_ms: Option<u64>,
) -> Observed {
    Observed {
        deliveries: deliveries.to_vec(),
        pulls: pulls.to_vec(),
        events: events.to_vec(),
        killed: Some((0, 1_000 * MS)),
        unpin_ns: unpin_ms.map(|u| u * MS),
        ..Observed::default()
    }
}

#[test]
fn the_pin_must_move_after_the_kill_and_no_sooner_than_priority_timeout() {
    let pulls = [pull(0, 900, PullEnd::Abandoned { at_ns: 1_000 * MS })];
    let after = [d(1, 3_000, 10, Some(1))];
    let events = [
        pinned(10, "A"),
        unpinned(2_900, "timeout"),
        pinned(2_901, "B"),
    ];
    let run = pin_run(&after, &pulls, &events, None);
    assert!(pin_moves_after_kill(&run).passed);
    let timed = no_early_failover(&run, TIMEOUT_NS);
    assert!(timed.passed, "{}", timed.detail);
    // No new pin.
    let stuck = [pinned(10, "A")];
    assert!(!pin_moves_after_kill(&pin_run(&after, &pulls, &stuck, None)).passed);
    // A new pin but nobody else received.
    assert!(!pin_moves_after_kill(&pin_run(&[], &pulls, &events, None)).passed);
    // Pinned 1 s after the last pull with a 2 s timeout: too early.
    let early = [pinned(10, "A"), pinned(1_900, "B")];
    let check = no_early_failover(&pin_run(&after, &pulls, &early, None), TIMEOUT_NS);
    assert!(!check.passed, "{}", check.detail);
    // An unpin in between explains an early pin.
    let check = no_early_failover(&pin_run(&after, &pulls, &early, Some(1_500)), TIMEOUT_NS);
    assert!(check.passed && !check.applicable);
}

#[test]
fn an_unpin_must_be_advised_and_give_a_new_pin() {
    let events = [
        pinned(10, "A"),
        unpinned(5_001, "admin"),
        pinned(5_002, "B"),
    ];
    assert!(pin_moves_after_unpin(&pin_run(&[], &[], &events, Some(5_000))).passed);
    let same = [
        pinned(10, "A"),
        unpinned(5_001, "admin"),
        pinned(5_002, "A"),
    ];
    assert!(!pin_moves_after_unpin(&pin_run(&[], &[], &same, Some(5_000))).passed);
    let silent = [pinned(10, "A"), pinned(5_002, "B")];
    assert!(!pin_moves_after_unpin(&pin_run(&[], &[], &silent, Some(5_000))).passed);
    let none = pin_moves_after_unpin(&pin_run(&[], &[], &events, None));
    assert!(!none.applicable);
}

#[test]
fn an_overflow_delivery_below_the_threshold_fails() {
    let at = |client, pending| GroupDelivery {
        pending,
        ..d(client, 1, 1, None)
    };
    // Client 0 asks without thresholds; 1 and 2 with min_pending 100.
    let fine = [at(0, 0), at(1, 99), at(2, 150)];
    assert!(overflow_threshold(&fine, |c| c >= 1, 100, 0).passed);
    let early = [at(0, 0), at(1, 98)];
    let check = overflow_threshold(&early, |c| c >= 1, 100, 0);
    assert!(
        !check.passed && check.detail.contains("at pending 99"),
        "{}",
        check.detail
    );
    assert!(!overflow_threshold(&early, |c| c >= 1, 100, 5).applicable);
}

#[test]
fn a_lower_level_served_while_a_higher_request_was_open_is_an_inversion() {
    let levels = [0, 1];
    // Level 0's request sent at 0 ms, filled by consumer seq 900; level 1
    // receives consumer seq 500 at 500 ms: the server passed over level 0.
    let pulls = [pull(
        0,
        0,
        PullEnd::Filled {
            last_consumer_seq: 900,
        },
    )];
    let low = d(1, 500, 1, None);
    let check = priority_order(&[low], &pulls, &levels, SECOND);
    assert!(!check.passed, "{}", check.detail);
    // Filled before: no inversion.
    let filled = [pull(
        0,
        0,
        PullEnd::Filled {
            last_consumer_seq: 400,
        },
    )];
    assert!(priority_order(&[low], &filled, &levels, SECOND).passed);
    // Sent within the grace before the delivery: it may not have arrived.
    let fresh = [pull(
        0,
        400,
        PullEnd::Filled {
            last_consumer_seq: 900,
        },
    )];
    assert!(priority_order(&[low], &fresh, &levels, SECOND).passed);
    // Expired unfilled well after the delivery: open throughout.
    let expired = [pull(0, 0, PullEnd::Released { at_ns: 2_000 * MS })];
    assert!(!priority_order(&[low], &expired, &levels, SECOND).passed);
    // Ended just after the delivery, within the grace: not counted.
    let ended = [pull(0, 0, PullEnd::Released { at_ns: 600 * MS })];
    assert!(priority_order(&[low], &ended, &levels, SECOND).passed);
    // A higher level never inverts against a lower one.
    let high = d(0, 500, 1, None);
    let low_pull = [pull(
        1,
        0,
        PullEnd::Filled {
            last_consumer_seq: 900,
        },
    )];
    assert!(priority_order(&[high], &low_pull, &levels, SECOND).passed);
}

#[test]
fn an_inversion_under_short_pulls_is_counted() {
    let levels = [0, 1];
    // Level 0's pull sent at 1,000 ms expires unfilled at 1,500 ms
    // (expires 500 ms, the shortest a profile could give before the grace
    // scaled); level 1 receives at 1,200 ms, mid-pull.
    let expires = Duration::from_millis(500);
    let released = [pull(0, 1_000, PullEnd::Released { at_ns: 1_500 * MS })];
    let mut low = d(1, 1_200, 1, None);
    let check = priority_order(&[low], &released, &levels, expires);
    assert!(!check.passed, "{}", check.detail);
    // Read within a grace of the pull's end: not counted.
    low.received_ns = 1_450 * MS;
    assert!(priority_order(&[low], &released, &levels, expires).passed);
    // 200 ms pulls: one sent at 1,000 ms, released at 1,200 ms, and a
    // delivery to level 1 at 1,100 ms.
    let expires = Duration::from_millis(200);
    let released = [pull(0, 1_000, PullEnd::Released { at_ns: 1_200 * MS })];
    low.received_ns = 1_100 * MS;
    assert_eq!(inversions(&[low], &released, &levels, expires).len(), 1);
}
