//! The backpressure scenario against a real server: the MaxAckPending
//! sweep reports its bound and time at the cap, and a greedy client with a
//! short AckWait has its expiries counted and explained.

mod common;

use common::{assert_all_passed, metric, run_profile};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_reports_bounds_and_time_at_the_cap() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "sweep",
        "[[scenario]]\nkind = \"backpressure\"\nduration = \"1s\"\nrate = 400\n\
         max_ack_pending = [1, 64]\n[scenario.consumer]\nbatch = 50\n\
         [scenario.behaviour]\nprocessing = \"5ms\"\nhandlers = 4\n",
    )
    .await;
    assert_all_passed(&summary);
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    let (one, many) = (variants[0], variants[1]);
    assert_eq!((one.name.as_str(), many.name.as_str()), ("map-1", "map-64"));
    // Little's law: one slot held 5 ms allows 200/s; 4 handlers 800/s, so
    // with 64 slots the offered 400/s is the bound.
    assert_eq!(metric(one, "bound"), 200.0);
    assert_eq!(metric(many, "bound"), 400.0);
    assert!(
        metric(one, "time_at_cap") > 0.5,
        "one slot is almost always taken"
    );
    for v in [one, many] {
        assert_eq!(v.ledger.acked, 400);
        assert_eq!(metric(v, "redeliveries"), 0.0);
        assert!(metric(v, "efficiency") > 0.0);
        assert!(v.timelines.contains_key("num_ack_pending"));
        assert!(v.timelines.contains_key("client_in_flight"));
        assert!(
            metric(v, "processing_measured.p50") >= 5_000.0,
            "a 5 ms sleep takes 5 ms or more"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_client_with_a_short_ack_wait_wastes_deliveries() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "expiry",
        "[[scenario]]\nkind = \"backpressure\"\nduration = \"1s\"\nrate = 500\n\
         expiry_ack_waits = [\"50ms\", \"10s\"]\nexpiry_max_ack_pending = 10000\n\
         [scenario.consumer]\nbatch = 200\n[scenario.behaviour]\nprocessing = \"5ms\"\nhandlers = 2\n",
    )
    .await;
    assert_all_passed(&summary);
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();
    let (short, long) = (variants[0], variants[1]);
    assert_eq!(
        (short.name.as_str(), long.name.as_str()),
        ("expiry-50ms", "expiry-10s")
    );
    let expired = metric(short, "redeliveries.expired");
    assert!(
        expired > 0.0,
        "messages waited in the client past a 50 ms AckWait"
    );
    assert_eq!(
        metric(short, "wasted_deliveries"),
        expired,
        "every waste is an expiry"
    );
    assert!(metric(short, "time_to_expired_answer.p50") >= 50_000.0);
    assert_eq!(metric(long, "redeliveries.expired"), 0.0);
    assert_eq!(long.ledger.acked, 500);
    assert_eq!(short.ledger.acked, 500, "every message still completes");
}
