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
        ["before-processing", "during-processing", "after-processing"]
    );
    for (_, v) in summary.variants() {
        let unacked = metric(v, "unacked_at_crash");
        assert!(unacked > 0.0, "{}: work was in hand", v.name);
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
