//! What one JetStream publish and one consumed, acknowledged message cost
//! end to end against a real nats-server: the embedded one jsbench starts
//! (same discovery as `jsbench run`: NATS_SERVER_BIN, `.tools/` from
//! scripts/setup.sh, PATH). Without a server the bench fails with the setup
//! command; a skipped bench would read as a pass.
//!
//! These are criterion's closed-loop numbers (the next message waits for
//! the previous one, or for a free slot in the window), with its statistics
//! and baselines (`--save-baseline`, `--baseline`); jsbench's scenarios add
//! open-loop rates, latency percentiles and the ledger on top.

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use jsbench::server::EmbeddedServer;
use tokio::runtime::Runtime;

const SIZE: usize = 128;
/// Outstanding PubAcks in the async benches: the Go client's PublishAsync
/// default neighbourhood, well below the context's in-flight limit.
const WINDOW: usize = 256;
/// The streams keep at most this many messages, so a long bench does not
/// fill the temporary store.
const KEEP: i64 = 200_000;

/// A server, a runtime and a JetStream context made inside it:
/// `jetstream::new` spawns a task and panics outside a runtime.
struct Setup {
    _server: EmbeddedServer,
    runtime: Runtime,
    js: jetstream::Context,
}

fn setup(stream_name: &str, subject: &str) -> Setup {
    let server = EmbeddedServer::start()
        .unwrap_or_else(|e| panic!("the end-to-end benches need nats-server: {e:#}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let js = runtime.block_on(async {
        let client = async_nats::connect(server.url())
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", server.url()));
        let js = jetstream::ContextBuilder::new()
            .max_ack_inflight(WINDOW + 1)
            .build(client);
        js.create_stream(stream::Config {
            name: stream_name.to_string(),
            subjects: vec![subject.to_string()],
            storage: stream::StorageType::File,
            max_messages: KEEP,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("creating stream {stream_name}: {e}"));
        js
    });
    Setup {
        _server: server,
        runtime,
        js,
    }
}

/// A fresh `Nats-Msg-Id` per call, unique across the whole bench.
fn next_id(counter: &AtomicU64) -> String {
    counter.fetch_add(1, Ordering::Relaxed).to_string()
}

fn message(payload: &Bytes, id: Option<&AtomicU64>) -> PublishMessage {
    let m = PublishMessage::build().payload(payload.clone());
    match id {
        Some(counter) => m.message_id(next_id(counter)),
        None => m,
    }
}

/// Publishes `n` messages keeping up to [`WINDOW`] PubAcks outstanding;
/// every one must be acknowledged.
async fn publish_windowed(
    js: &jetstream::Context,
    subject: &'static str,
    payload: &Bytes,
    n: u64,
    ids: Option<&AtomicU64>,
) {
    let mut inflight: FuturesUnordered<<PublishAckFuture as IntoFuture>::IntoFuture> =
        FuturesUnordered::new();
    for _ in 0..n {
        if inflight.len() >= WINDOW {
            inflight
                .next()
                .await
                .expect("one in flight")
                .expect("a PubAck");
        }
        let ack = js
            .send_publish(subject, message(payload, ids))
            .await
            .expect("publish");
        inflight.push(ack.into_future());
    }
    while let Some(ack) = inflight.next().await {
        ack.expect("a PubAck");
    }
}

fn publish(c: &mut Criterion) {
    const SUBJECT: &str = "bench.publish";
    let Setup {
        _server,
        runtime,
        js,
    } = setup("BENCH_PUBLISH", SUBJECT);
    let payload = Bytes::from(vec![b'.'; SIZE]);
    let ids = Arc::new(AtomicU64::new(0));
    let mut group = c.benchmark_group("publish");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    for with_id in [false, true] {
        let name = if with_id { "sync_with_id" } else { "sync" };
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let ids = with_id.then_some(&*ids);
                js.send_publish(SUBJECT, message(&payload, ids))
                    .await
                    .expect("publish")
                    .await
                    .expect("a PubAck")
            })
        });
    }
    for with_id in [false, true] {
        let name = if with_id {
            "async_window_with_id"
        } else {
            "async_window"
        };
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|n| {
                let (js, payload, ids) = (js.clone(), payload.clone(), ids.clone());
                async move {
                    let started = Instant::now();
                    let ids = with_id.then_some(&*ids);
                    publish_windowed(&js, SUBJECT, &payload, n, ids).await;
                    started.elapsed()
                }
            })
        });
    }
    group.finish();
}

fn consume(c: &mut Criterion) {
    const SUBJECT: &str = "bench.consume";
    const STREAM: &str = "BENCH_CONSUME";
    let Setup {
        _server,
        runtime,
        js,
    } = setup(STREAM, SUBJECT);
    let payload = Bytes::from(vec![b'.'; SIZE]);
    let mut group = c.benchmark_group("consume");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    for double_ack in [false, true] {
        let name = if double_ack { "double_ack" } else { "ack" };
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|n| {
                let (js, payload) = (js.clone(), payload.clone());
                async move {
                    // Not timed: an empty stream, n messages, a new durable.
                    let stream = js.get_stream(STREAM).await.expect("the stream");
                    stream.purge().await.expect("purge");
                    publish_windowed(&js, SUBJECT, &payload, n, None).await;
                    let durable = stream
                        .create_consumer(consumer::pull::Config {
                            durable_name: Some("bench".into()),
                            ack_policy: AckPolicy::Explicit,
                            deliver_policy: DeliverPolicy::All,
                            max_ack_pending: 10_000,
                            ..Default::default()
                        })
                        .await
                        .expect("a durable consumer");

                    let started = Instant::now();
                    let mut messages = durable
                        .stream()
                        .max_messages_per_batch(500)
                        .expires(Duration::from_secs(30))
                        .messages()
                        .await
                        .expect("consuming");
                    for _ in 0..n {
                        let m = messages
                            .next()
                            .await
                            .expect("a delivery")
                            .expect("no consume error");
                        if double_ack {
                            m.double_ack().await.expect("a confirmed ack");
                        } else {
                            m.ack().await.expect("an ack");
                        }
                    }
                    let elapsed = started.elapsed();
                    drop(messages);
                    stream
                        .delete_consumer("bench")
                        .await
                        .expect("delete the durable");
                    elapsed
                }
            })
        });
    }
    group.finish();
}

/// Criterion draws its HTML report with plotters, which jsbench builds
/// without system fonts; the bundled font must be registered first.
fn config() -> Criterion {
    jsbench::report::fonts::ensure_registered().expect("the bundled font registers");
    Criterion::default()
}

criterion_group! {
    name = benches;
    config = config();
    targets = publish, consume
}
criterion_main!(benches);
