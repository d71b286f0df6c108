//! The fanout scenario on a real server: many streams and durables in one
//! variant, each durable filtered as its shape says and checked on its
//! own, with a row per stream and durable in the parts table.

mod common;

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;

/// 2 streams at 200 msg/s each for 3 s (600 messages per stream, 150 per
/// subject), 3 durables per stream: one subject, two, all four.
const BODY: &str = "[[scenario]]\nkind = \"fanout\"\nname = \"fan\"\nduration = \"3s\"\n\
    rate = 400\nstreams = 2\ndurables = 3\nsubjects = 4\nconnections = 2\ndrain_timeout = \"5s\"\n";

/// The filters of every durable of the run's first stream, as the server
/// holds them, read while the run goes on.
async fn filters_on_the_server(client: async_nats::Client) -> Vec<(String, Vec<String>)> {
    let js = jetstream::new(client);
    for _ in 0..2000 {
        let names: Vec<String> = js
            .stream_names()
            .filter_map(|n| async move { n.ok() })
            .collect()
            .await;
        if let Some(name) = names.iter().find(|n| n.ends_with("_FAN_S2-D3-0")) {
            let stream = js.get_stream(name).await.unwrap();
            let mut out = Vec::new();
            for k in 0..3 {
                let durable = format!("jsb_fan_s2-d3-0-{k}");
                for _ in 0..200 {
                    let got: Result<jetstream::consumer::PullConsumer, _> =
                        stream.get_consumer(&durable).await;
                    if let Ok(c) = got {
                        let config = &c.cached_info().config;
                        let mut filters = config.filter_subjects.clone();
                        if !config.filter_subject.is_empty() {
                            filters.push(config.filter_subject.clone());
                        }
                        out.push((durable.clone(), filters));
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            return out;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the fanout streams never appeared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durable_gets_what_its_filter_selects_and_is_checked_on_its_own() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(dir.path(), "fan", BODY);
    let client = async_nats::connect(server.url()).await.unwrap();
    let observer = tokio::spawn(filters_on_the_server(client));
    // The server's monitoring endpoint, for memory per durable.
    let mut options = common::options(server.url(), &profile, dir.path());
    options.monitor = Some(server.monitor_url().expect("a monitoring port").to_string());
    let outcome = jsbench::run::run(options, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    let summary = common::summary(&outcome.results[0]);
    common::assert_all_passed(&summary);

    // One subject as filter_subject, two as filter_subjects, all as none.
    let filters = observer.await.unwrap();
    let suffixes: Vec<Vec<&str>> = filters
        .iter()
        .map(|(_, f)| f.iter().map(|s| s.rsplit('.').next().unwrap()).collect())
        .collect();
    assert_eq!(suffixes, [vec!["0"], vec!["1", "2"], vec![]], "{filters:?}");

    let (_, v) = summary.variants().next().unwrap();
    assert_eq!(v.name, "s2-d3");
    assert_eq!(v.ledger.persisted, 1200, "{:?}", v.ledger);
    // Each stream's 600 messages reach its durables 150 + 300 + 600 times.
    assert_eq!(v.ledger.deliveries, 2 * 1050, "{:?}", v.ledger);
    assert!((common::metric(v, "deliveries_per_message") - 1.75).abs() < 1e-9);
    for name in [
        "lost = 0",
        "only what its filter selects delivered",
        "server reports nothing pending",
    ] {
        let i = v.invariants.iter().find(|i| i.name == name).unwrap();
        assert!(i.detail.contains("all 6 durables"), "{name}: {}", i.detail);
    }
    let i = v
        .invariants
        .iter()
        .find(|i| i.name == "stream holds every PubAcked message, and no other")
        .unwrap();
    assert!(i.detail.contains("all 2 streams"), "{}", i.detail);

    // The parts table: a row per stream and per durable, each durable's
    // due as its filter selects.
    let file = v.parts_file.as_ref().expect("a parts table");
    let mut table = csv::Reader::from_path(outcome.results[0].join(file)).unwrap();
    let headers = table.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = table.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.iter().filter(|r| &r[0] == "stream").count(), 2);
    let dues: Vec<(String, String)> = rows
        .iter()
        .filter(|r| &r[0] == "durable")
        .map(|r| (r[1].to_string(), r[column("due")].to_string()))
        .collect();
    assert_eq!(dues.len(), 6);
    for (name, due) in dues {
        let want = match name.rsplit('-').next().unwrap() {
            "0" => "150",
            "1" => "300",
            _ => "600",
        };
        assert_eq!(due, want, "{name}");
    }
    // Memory per durable is its growth while they were created; a server
    // that had heap to spare says so rather than report zero.
    assert!(
        v.metric("server_mem_per_durable")
            .is_some_and(|m| m.value > 0.0)
            || v.warnings
                .iter()
                .any(|w| w.contains("did not grow while 6 durables")),
        "{:?}",
        v.warnings
    );
    for metric in [
        "create_durable_time",
        "durable_e2e_p99_max",
        "server_cpu_per_delivery",
    ] {
        assert!(common::metric(v, metric) >= 0.0);
    }
}
