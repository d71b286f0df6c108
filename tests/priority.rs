//! The priority scenario against a real server, one short run per policy:
//! the pinned client killed and the pin released by hand, overflow clients
//! under a step load that crosses their threshold, prioritized levels.
//! Bounds are structural (what the server's rules imply), generous where
//! they involve time.

mod common;

use common::{assert_all_passed, metric, run_profile};
use jsbench::results::summary::VariantReport;

fn only(summary: &jsbench::results::summary::Summary) -> &VariantReport {
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    assert_eq!(variants.len(), 1);
    variants[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pin_moves_one_priority_timeout_after_the_killed_clients_last_pull() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "pinned",
        "[[scenario]]\nkind = \"priority\"\nduration = \"4s\"\nrate = 200\n\
         policy = \"pinned_client\"\nclients = 3\npriority_timeout = \"1s\"\nexpires = \"300ms\"\n\
         kill_after = \"1s\"\nunpin_after = \"3s\"\n\
         [scenario.consumer]\nack_wait = \"1s\"\nbatch = 10\n",
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary);
    for i in &v.invariants {
        assert!(i.applicable, "{}: {}", i.name, i.detail);
    }
    assert_eq!(metric(v, "deliveries_outside_pin"), 0.0);
    // The server's timer restarts at every pull carrying the pin, so the
    // new pin comes at least priority_timeout after the last one.
    assert!(metric(v, "failover_after_last_pull") >= 995.0);
    let failover = metric(v, "failover_time");
    assert!(failover > 0.0 && failover < 10_000.0, "{failover}");
    assert!(metric(v, "unpin_to_new_pin") < 5_000.0);
    assert!(metric(v, "deliveries") >= 800.0);
    assert_eq!(v.ledger.persisted, 800);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_clients_receive_only_once_pending_reaches_their_threshold() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "overflow",
        "[[scenario]]\nkind = \"priority\"\nduration = \"4s\"\n\
         arrival = { pattern = \"steps\", steps = [{ rate = 50, for = \"1s\" }, { rate = 800, for = \"1s\" }, { rate = 50, for = \"2s\" }] }\n\
         policy = \"overflow\"\nclients = 2\nmin_pending = 50\nprocessing = \"5ms\"\n\
         [scenario.consumer]\nbatch = 10\n",
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary);
    let onset = metric(v, "overflow_onset_pending");
    assert!(onset >= 50.0, "{onset}");
    assert_eq!(metric(v, "step1.overflow_share"), 0.0);
    assert!(metric(v, "step2.overflow_share") > 0.0);
    assert!(metric(v, "overflow_last_pending") >= 50.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_level_receives_only_when_the_higher_ones_are_full() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "prioritized",
        "[[scenario]]\nkind = \"priority\"\nduration = \"3s\"\n\
         arrival = { pattern = \"steps\", steps = [{ rate = 40, for = \"1s\" }, { rate = 400, for = \"2s\" }] }\n\
         policy = \"prioritized\"\nclients = 3\nlevels = [0, 1, 2]\nprocessing = \"10ms\"\n\
         [scenario.consumer]\nbatch = 5\n",
    )
    .await;
    assert_all_passed(&summary);
    let v = only(&summary);
    assert_eq!(metric(v, "priority_inversions"), 0.0);
    assert!(metric(v, "step1.level0_share") > 0.5);
    assert!(metric(v, "step2.level2_share") > 0.0);
    let shares: f64 = (0..3).map(|l| metric(v, &format!("level{l}_share"))).sum();
    assert!((shares - 1.0).abs() < 1e-9, "{shares}");
}
