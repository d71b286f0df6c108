//! The ack scenario against a real server: every ack mode by consume and by
//! fetch reads the whole pre-filled stream, nothing lost or redelivered.

mod common;

use common::{assert_all_passed, metric, run_profile};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ack_mode_reads_everything_and_double_ack_is_timed() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "acks",
        "[[scenario]]\nkind = \"ack\"\nmessages = 2000\nreads = [\"pull\", \"fetch\"]\n\
         [scenario.consumer]\nack_every = 50\nbatch = 100\n",
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "consume.explicit",
            "consume.none",
            "consume.all",
            "consume.double",
            "fetch.explicit",
            "fetch.none",
            "fetch.all",
            "fetch.double",
        ]
    );
    for (_, v) in summary.variants() {
        assert_eq!(v.ledger.delivered, 2000, "{}", v.name);
        assert_eq!(v.ledger.redelivered, 0, "{}", v.name);
        assert!(metric(v, "consume_rate") > 0.0);
        let double = v.name.ends_with("double");
        assert_eq!(
            v.metric("double_ack_rtt.p50").is_some(),
            double,
            "{}",
            v.name
        );
        if double {
            let rtt = v
                .histograms
                .iter()
                .find(|h| h.name == "double_ack_rtt")
                .unwrap();
            assert_eq!(rtt.count, 2000, "every double ack timed");
        }
        assert_eq!(
            v.metric("vs_explicit.throughput_ratio").is_some(),
            !v.name.ends_with("explicit"),
            "{}",
            v.name
        );
    }
}
