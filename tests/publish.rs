//! The publish scenario against a real server: every mode, the dedup
//! promise (flagged = injected, late retries stored, the stream read back),
//! and the reference loops.

mod common;

use common::{assert_all_passed, metric, run_profile};

fn publish(extra: &str) -> String {
    format!("[[scenario]]\nkind = \"publish\"\n{extra}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_duplicates_are_flagged_and_late_retries_stored_again() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "promise",
        &publish(
            "duration = \"2500ms\"\nrates = [1000]\npublishers = 2\nmsg_id = \"unique\"\n\
             duplicates = 0.1\nlate_duplicates = 0.05\nduplicate_window = \"500ms\"\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    let injected = metric(v, "duplicates_injected");
    assert!(injected > 100.0, "about 10% of 2500 sends: {injected}");
    assert_eq!(metric(v, "duplicates_flagged"), injected);
    let late = metric(v, "late_retries");
    assert!(late > 20.0, "{late}");
    assert_eq!(metric(v, "late_retries_stored"), late);
    assert_eq!(v.ledger.duplicates as f64, injected);
    assert_eq!(v.ledger.published, 2500);
    // Stored: every new message once, every late retry once more.
    assert_eq!(v.ledger.persisted as f64, 2500.0 - injected);
    assert_eq!(v.params["read_back_messages"], v.ledger.persisted);
    for name in [
        "duplicates flagged = injected",
        "retries after the window stored",
        "stream count = unique persisted",
        "nothing lost (read back)",
        "nothing stored unconfirmed (read back)",
    ] {
        assert!(v.invariants.iter().any(|i| i.name == name), "checks {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_and_async_max_rate_publish_everything_with_and_without_ids() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "modes",
        &publish(
            "name = \"sync\"\nmode = \"sync\"\nduration = \"500ms\"\nrates = [\"max\"]\n\
             [[scenario]]\nkind = \"publish\"\nname = \"async\"\nduration = \"500ms\"\n\
             rates = [\"max\"]\nmsg_id = [\"none\", \"unique\"]\npub_ack_window = 256\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<String> = summary
        .variants()
        .map(|(s, v)| format!("{}/{}", s.name, v.name))
        .collect();
    assert_eq!(
        names,
        [
            "sync/rate-max.id-none",
            "async/rate-max.id-none",
            "async/rate-max.id-unique"
        ]
    );
    for (_, v) in summary.variants() {
        assert!(v.ledger.published > 100, "{}: {:?}", v.name, v.ledger);
        assert_eq!(v.ledger.persisted, v.ledger.published);
        assert!(metric(v, "publish_rate") > 0.0);
        assert!(metric(v, "client_cpu_per_msg") > 0.0);
        assert!(
            v.metric("server_cpu_per_msg").is_none(),
            "an external server without --monitor has no CPU figure"
        );
        assert!(v.metric("target_rate").is_none(), "max rate has no target");
    }
    let (_, unique) = summary.variants().last().unwrap();
    assert!(metric(unique, "dedup_price.throughput_ratio") > 0.0);
    assert!(metric(unique, "dedup_price.p99_ratio") > 0.0);
    let (_, sync) = summary.variants().next().unwrap();
    assert_eq!(sync.params["pub_ack_window"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_loops_run_beside_and_are_compared() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "ceiling",
        &publish(
            "duration = \"500ms\"\nrates = [\"max\"]\nmsg_id = [\"none\", \"unique\"]\n\
             pub_ack_window = 512\nreference = [\"minimal\", \"core\"]\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rate-max.core",
            "rate-max.id-none.minimal",
            "rate-max.id-none",
            "rate-max.id-unique.minimal",
            "rate-max.id-unique",
        ]
    );
    for (_, v) in summary.variants() {
        assert!(metric(v, "publish_rate") > 0.0, "{}", v.name);
    }
    for (_, v) in summary
        .variants()
        .filter(|(_, v)| !v.name.contains("core") && !v.name.ends_with("minimal"))
    {
        assert!(metric(v, "vs_minimal.throughput_ratio") > 0.0);
        assert!(metric(v, "vs_core.throughput_ratio") > 0.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_sizes_headers_and_per_publisher_rates() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "mixed",
        &publish(
            "duration = \"1s\"\nrates = [150]\nrate_per = \"publisher\"\npublishers = 2\n\
             subjects = 3\nheaders = { \"X-Tenant\" = \"t1\" }\n\
             message_size = { distribution = \"uniform\", min = 100, max = 300 }\n",
        ),
    )
    .await;
    assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    assert_eq!(
        metric(v, "target_rate"),
        300.0,
        "150 per publisher, 2 publishers"
    );
    assert_eq!(v.ledger.published, 300);
    let mb_s = metric(v, "publish_throughput");
    let mean_size = mb_s * 1e6 / metric(v, "publish_rate");
    assert!(
        (150.0..250.0).contains(&mean_size),
        "mean size about 200: {mean_size}"
    );
    assert_eq!(v.params["subjects"], 3);
    assert_eq!(v.params["message_size"], "uniform 100..=300");
}
