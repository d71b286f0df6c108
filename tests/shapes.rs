//! Load shapes on the paced scenarios beyond latency: the shape sets the
//! variant's rate (its mean), the schedule follows it, every invariant is
//! checked as under a steady load, and a step load reports each step.

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_redelivery_and_dlq_run_under_a_shape_with_their_invariants() {
    let server = common::server();
    let body = "[[scenario]]\nkind = \"fanout\"\nduration = \"2s\"\nstreams = 2\ndurables = 2\nfilters = \"all\"\n\
                arrival = { pattern = \"steps\", steps = [{ rate = 200, for = \"1s\" }, \
                { rate = 600, for = \"1s\" }] }\n\
                [[scenario]]\nkind = \"redelivery\"\nduration = \"2s\"\n\
                arrival = { pattern = \"bursts\", size = 50, spacing = \"100us\", pause = \"250ms\" }\n\
                [scenario.consumer]\nack_wait = \"1s\"\n\
                [scenario.behaviour]\nnak = 0.1\n\
                [[scenario]]\nkind = \"dlq\"\nduration = \"2s\"\n\
                arrival = { pattern = \"ramp\", from = 50, to = 250 }\n\
                [scenario.consumer]\nack_wait = \"300ms\"\nmax_deliver = 2\n\
                [scenario.behaviour]\npoison = { fraction = 0.05 }\n";
    let summary = common::run_profile(&server, "shapes", body).await;
    common::assert_all_passed(&summary);
    let variants: Vec<_> = summary.variants().map(|(_, v)| v).collect();

    // The fan-out: 200 then 600 msg/s over both streams, each step on its own.
    let fan = variants.iter().find(|v| v.name == "s2-d2").unwrap();
    // 600/s leaves a fraction of a gap at the end of its second: one more.
    let published = fan.ledger.published;
    assert!((800..=801).contains(&published), "{published}");
    assert_eq!(
        fan.ledger.deliveries,
        2 * published,
        "two durables per stream"
    );
    assert!(fan.params["arrival"].as_str().unwrap().starts_with("steps"));
    assert!(common::metric(fan, "step1.e2e_latency.p99") > 0.0);
    assert!(common::metric(fan, "step2.e2e_latency.p99") > 0.0);

    // Bursts of 50 every ~255 ms for 2 s: the rate is the shape's mean.
    let burst = variants
        .iter()
        .find(|v| {
            v.params
                .get("arrival")
                .is_some_and(|a| a.as_str().unwrap().starts_with("bursts"))
        })
        .expect("a redelivery variant under bursts");
    let published = burst.ledger.published;
    assert!((350..=450).contains(&published), "{published}");
    let rate = burst.params["rate"].as_u64().unwrap();
    assert!((175..=225).contains(&rate), "{rate}");

    // A ramp from 50 to 250 msg/s: about 300 messages in 2 s.
    let dlq = variants
        .iter()
        .find(|v| {
            v.params
                .get("arrival")
                .is_some_and(|a| a.as_str().unwrap().starts_with("ramp"))
        })
        .expect("a dlq variant under a ramp");
    assert!(
        (280..=320).contains(&dlq.ledger.published),
        "{}",
        dlq.ledger.published
    );
}
