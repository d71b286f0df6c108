//! The resume scenario against a real server: a client crashes with work
//! in hand at each point, a new one binds, and exactly the unacked work
//! comes back.

mod common;

use common::{assert_all_passed, metric, run_profile};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_redelivers_exactly_the_unacked_work() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "resume",
        "[[scenario]]\nkind = \"resume\"\nduration = \"1500ms\"\nrate = 200\ncrash_after = \"700ms\"\n\
         rebind_after = \"200ms\"\n[scenario.consumer]\nack_wait = \"500ms\"\nbatch = 20\n\
         [scenario.behaviour]\nprocessing = \"20ms\"\nhandlers = 4\n",
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "before-processing",
            "during-processing",
            "after-processing",
            "graceful-drain"
        ]
    );
    for (_, v) in summary.variants() {
        let unacked = metric(v, "unacked_at_crash");
        if v.name == "graceful-drain" {
            // What the client held and had received it finished; only what
            // the server sent after the stop waits for its deadline.
            let drained = v.metric("drained").map_or(0.0, |m| m.value);
            assert!(
                metric(v, "in_hand_at_crash") + drained > 0.0,
                "work to finish"
            );
            assert!(metric(v, "time_to_stop") > 0.0);
        } else {
            assert!(unacked > 0.0, "{}: work was in hand", v.name);
        }
        assert_eq!(metric(v, "redelivered"), unacked, "{}", v.name);
        assert_eq!(v.ledger.acked, 300, "{}", v.name);
        // The replacement binds after the planned downtime; redeliveries
        // wait for the ack deadline of the lost deliveries.
        assert!(metric(v, "time_to_resume") >= 200.0, "{}", v.name);
        assert!(metric(v, "time_to_first_redelivery") > 0.0, "{}", v.name);
        let twice = metric(v, "work_ran_twice");
        if v.name == "after-processing" {
            assert!(twice > 0.0, "work done before the crash runs again");
            assert_eq!(twice, metric(v, "processed_unacked"));
        } else {
            assert_eq!(twice, 0.0, "{}", v.name);
        }
    }
}

/// Crashing after the work and before the ack: handlers without a dedup
/// store apply that work twice; with one (a KV bucket both clients share)
/// the repeat finds its key and is suppressed, so every message's work is
/// applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_consumer_applies_no_work_twice_across_a_crash() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "idempotent",
        "[[scenario]]\nkind = \"resume\"\nduration = \"1500ms\"\nrate = 200\ncrash_after = \"700ms\"\n\
         rebind_after = \"200ms\"\ncrash_at = \"after_processing\"\nidempotent = [false, true]\n\
         [scenario.consumer]\nack_wait = \"500ms\"\nbatch = 20\n\
         [scenario.behaviour]\nprocessing = \"20ms\"\nhandlers = 4\n",
    )
    .await;
    assert_all_passed(&summary);
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    let (plain, idempotent) = (variants[0], variants[1]);
    assert_eq!(idempotent.name, "after-processing.idempotent");
    let redone = metric(plain, "processed_unacked");
    assert!(redone > 0.0, "work was done and not acked");
    assert_eq!(metric(plain, "work_done_twice"), redone);
    assert_eq!(metric(idempotent, "work_done_twice"), 0.0);
    // Every repeat of done work suppressed (and a handler killed between
    // its key's creation and its report adds one more).
    assert!(metric(idempotent, "work_suppressed") >= metric(idempotent, "processed_unacked"));
    assert!(metric(idempotent, "dedup_check.p50") > 0.0);
    assert!(metric(idempotent, "dedup_store_bytes_per_key") > 0.0);
    let applied = idempotent
        .invariants
        .iter()
        .find(|i| i.name == "every message's work applied once")
        .unwrap();
    assert!(applied.passed && applied.applicable, "{applied:?}");
}
