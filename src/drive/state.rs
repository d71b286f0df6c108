//! The durable as the server reports it: now, and once it has settled.

use std::time::{Duration, Instant};

use async_nats::jetstream;

use super::ConsumerState;

/// The durable as the server sees it now; `None` when it cannot say.
pub(super) async fn consumer_state(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
) -> Option<ConsumerState> {
    let stream = js.get_stream(stream).await.ok()?;
    // Pull or push alike.
    let consumer: jetstream::consumer::Consumer<jetstream::consumer::Config> =
        stream.get_consumer(durable).await.ok()?;
    let info = consumer.get_info().await.ok()?;
    Some(ConsumerState {
        num_pending: info.num_pending,
        num_ack_pending: info.num_ack_pending,
        num_redelivered: info.num_redelivered,
        delivered_stream_seq: info.delivered.stream_sequence,
    })
}

/// Polls consumer info until nothing is pending or `until` passes.
pub(super) async fn settled_state(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
    until: Instant,
) -> Option<ConsumerState> {
    loop {
        let state = consumer_state(js, stream, durable).await;
        let settled = state.is_some_and(|s| s.num_pending == 0 && s.num_ack_pending == 0);
        if settled || Instant::now() >= until {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
