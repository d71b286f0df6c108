//! Streams and pulls as operators configure them: `[scenario.stream]`
//! and the pull keys of `[scenario.consumer]` take lists that make
//! side-by-side variants in one run, and a stream at its limits is
//! accounted for: what discard old evicted is told from what was lost,
//! what discard new refused is counted with its error code.

mod common;

use jsbench::results::summary::VariantReport;

/// Runs `body` with `--keep` (so the test can read what the server was
/// given) and returns its summary, every invariant held.
async fn run_kept(
    server: &jsbench::server::EmbeddedServer,
    name: &str,
    body: &str,
) -> jsbench::results::summary::Summary {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(dir.path(), name, body);
    let mut options = common::options(server.url(), &profile, dir.path());
    options.keep = true;
    let outcome = jsbench::run::run(options, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    let summary = common::summary(&outcome.results[0]);
    common::assert_all_passed(&summary);
    summary
}

/// The variants' names, in run order.
fn names(summary: &jsbench::results::summary::Summary) -> Vec<&str> {
    summary.variants().map(|(_, v)| v.name.as_str()).collect()
}

fn param<'a>(v: &'a VariantReport, key: &str) -> &'a serde_json::Value {
    v.params
        .get(key)
        .unwrap_or_else(|| panic!("{} has no param {key}", v.name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_and_memory_with_both_discard_policies_in_one_run_account_for_every_message() {
    let server = common::server();
    // 500 msg/s for 1 s into streams that hold 100: each variant hits
    // max_msgs and either evicts (old) or refuses (new) the rest.
    let body = common::latency_body(
        "[500]",
        "1s",
        "0s",
        "[scenario.stream]\nstorage = [\"file\", \"memory\"]\ndiscard = [\"old\", \"new\"]\nmax_msgs = 100\n",
    );
    let summary = common::run_profile(&server, "limits", &body).await;
    common::assert_all_passed(&summary);
    assert_eq!(
        names(&summary),
        [
            "rate-500.file.discard-old",
            "rate-500.file.discard-new",
            "rate-500.memory.discard-old",
            "rate-500.memory.discard-new"
        ]
    );
    for (_, v) in summary.variants() {
        let storage = if v.name.contains("file") {
            "file"
        } else {
            "memory"
        };
        assert_eq!(param(v, "stream.storage"), storage);
        let c = &v.ledger;
        assert_eq!(c.lost, 0, "{}", v.name);
        assert!(c.published >= 400, "{}: {c:?}", v.name);
        if v.name.ends_with("discard-old") {
            // Every message stored, the oldest evicted down to 100.
            assert_eq!(c.persisted, c.published, "{}", v.name);
            assert_eq!(c.evicted, c.persisted - 100, "{}: {c:?}", v.name);
            assert_eq!(c.refused_by_limit, 0);
            assert_eq!(common::metric(v, "evicted"), c.evicted as f64);
            let warning = v
                .warnings
                .iter()
                .find(|w| w.contains("reached a limit"))
                .unwrap_or_else(|| panic!("{}: {:?}", v.name, v.warnings));
            assert!(
                warning.contains("max_msgs 100: holds 100")
                    && warning.contains("after the first send"),
                "says which limit and when: {warning}"
            );
        } else {
            // The first 100 stored, the rest refused with the limit's code.
            assert_eq!(c.persisted, 100, "{}: {c:?}", v.name);
            assert_eq!(c.refused_by_limit, c.published - 100, "{}: {c:?}", v.name);
            assert_eq!(c.publish_errors, c.refused_by_limit);
            assert_eq!(c.evicted, 0);
            let persisted = v
                .invariants
                .iter()
                .find(|i| i.name == "every publish persisted")
                .unwrap();
            assert!(
                persisted.detail.contains("refused by the stream's limits")
                    && persisted.detail.contains("10077"),
                "{persisted:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_settings_reach_the_server() {
    let server = common::server();
    let summary = run_kept(
        &server,
        "settings",
        &common::latency_body(
            "[200]",
            "300ms",
            "0s",
            "[scenario.stream]\nstorage = \"memory\"\nmax_age = \"10m\"\nmax_bytes = \"8MiB\"\n\
             max_msg_size = 4096\nduplicate_window = \"1m\"\ncompression = \"s2\"\nallow_direct = true\n",
        ),
    )
    .await;
    let (_, v) = summary.variants().next().unwrap();
    assert_eq!(
        v.name, "rate-200",
        "one combination keeps the variant's name"
    );
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(&v.streams[0].stream).await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    use async_nats::jetstream::stream::{Compression, StorageType};
    assert_eq!(config.storage, StorageType::Memory);
    assert_eq!(config.max_age, std::time::Duration::from_secs(600));
    assert_eq!(config.max_bytes, 8 << 20);
    assert_eq!(config.max_message_size, 4096);
    assert_eq!(config.duplicate_window, std::time::Duration::from_secs(60));
    assert_eq!(config.compression, Some(Compression::S2));
    assert!(config.allow_direct);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_keys_sweep_and_reach_the_server() {
    let server = common::server();
    let summary = run_kept(
        &server,
        "pulls",
        &common::latency_body(
            "[300]",
            "400ms",
            "0s",
            "[scenario.consumer]\nbatch = [1, 200]\nmax_bytes = \"64KiB\"\nexpires = \"3s\"\n\
             idle_heartbeat = \"1s\"\nmax_waiting = 16\n",
        ),
    )
    .await;
    assert_eq!(
        summary.scenarios.len(),
        1,
        "one scenario, its sweep as variants"
    );
    assert_eq!(names(&summary), ["rate-300.batch-1", "rate-300.batch-200"]);
    let variants: Vec<&VariantReport> = summary.variants().map(|(_, v)| v).collect();
    assert_eq!(param(variants[0], "batch"), 1);
    assert_eq!(param(variants[1], "pull")["max_bytes"], 65536);
    // The durable got max_waiting; a pull of one message at a time still
    // delivered everything.
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    for v in variants {
        assert_eq!(v.ledger.lost, 0);
        let stream = js.get_stream(&v.streams[0].stream).await.unwrap();
        let mut names = stream.consumer_names();
        use futures::StreamExt;
        let durable = names.next().await.unwrap().unwrap();
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer(&durable).await.unwrap();
        assert_eq!(consumer.info().await.unwrap().config.max_waiting, 16);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_queue_and_interest_streams_remove_what_was_acked_and_nothing_is_called_lost() {
    let server = common::server();
    let body = common::latency_body(
        "[300]",
        "500ms",
        "0s",
        "[scenario.stream]\nretention = [\"limits\", \"workqueue\", \"interest\"]\nmax_msgs = 100000\n",
    );
    let summary = common::run_profile(&server, "retention", &body).await;
    common::assert_all_passed(&summary);
    assert_eq!(
        names(&summary),
        ["rate-300.limits", "rate-300.workqueue", "rate-300.interest"]
    );
    for (_, v) in summary.variants() {
        let c = &v.ledger;
        assert_eq!(c.evicted, 0, "{}: acks are no evictions: {c:?}", v.name);
        let holds = v
            .invariants
            .iter()
            .find(|i| i.name == "stream holds every persisted message")
            .unwrap();
        if v.name.ends_with("limits") {
            assert_eq!(c.removed_by_ack, 0);
        } else {
            assert_eq!(c.removed_by_ack, c.persisted, "{}: {c:?}", v.name);
            assert!(holds.detail.starts_with("holds 0;"), "{holds:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_pull_side_by_side_and_a_push_queue_group_with_flow_control() {
    let server = common::server();
    let body = format!(
        "{}\n{}",
        common::latency_body(
            "[500]",
            "500ms",
            "0s",
            "[scenario.consumer]\nkind = [\"pull\", \"push\"]\n"
        ),
        common::latency_body(
            "[500]",
            "500ms",
            "0s",
            "name = \"queue\"\n[scenario.consumer]\nkind = \"push\"\nconsumers = 2\nflow_control = true\nrate_limit = 100000000\n"
        )
    );
    let summary = run_kept(&server, "push", &body).await;
    assert_eq!(
        names(&summary),
        ["rate-500.pull", "rate-500.push", "rate-500"],
        "pull and push in one table, then the queue group"
    );
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    for (s, v) in summary.variants() {
        assert_eq!(v.ledger.lost, 0);
        let stream = js.get_stream(&v.streams[0].stream).await.unwrap();
        use futures::StreamExt;
        let durable = stream.consumer_names().next().await.unwrap().unwrap();
        let mut consumer: async_nats::jetstream::consumer::Consumer<
            async_nats::jetstream::consumer::Config,
        > = stream.get_consumer(&durable).await.unwrap();
        let config = consumer.info().await.unwrap().config.clone();
        let push = v.name.ends_with("push") || s.name == "queue";
        assert_eq!(config.deliver_subject.is_some(), push, "{}", v.name);
        if s.name == "queue" {
            assert_eq!(config.deliver_group.as_deref(), Some(durable.as_str()));
            assert!(config.flow_control);
            assert!(
                !config.idle_heartbeat.is_zero(),
                "flow control needs heartbeats"
            );
            assert_eq!(config.rate_limit, 100_000_000);
            // Two clients bound to the queue group.
            let clients = v.params.get("consumers").and_then(|c| c.as_u64());
            assert_eq!(clients, Some(2));
        }
    }
}
