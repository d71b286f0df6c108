//! The interest variant's second consumer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::consume::{self, ConsumerConfig, ConsumerProgress, ConsumerReport};
use crate::drive::RunContext;

/// The consumer of an interest stream that acks everything: the one whose
/// interest keeps an original alive until it has acked it.
pub(super) struct Other {
    progress: Arc<ConsumerProgress>,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<ConsumerReport>>,
}

/// What the other consumer did, or why it did not.
pub(super) type OtherEnd = Result<ConsumerReport, String>;

impl Other {
    pub async fn start(
        ctx: &RunContext,
        stream: &str,
        durable: String,
        messages: u64,
    ) -> Result<Other> {
        let client = ctx.connect.connect("consumer-other").await?;
        let progress = Arc::new(ConsumerProgress::default());
        let stop = tokio_util::sync::CancellationToken::new();
        let config = ConsumerConfig {
            durable,
            // Its latency is not this scenario's subject.
            record_from_ns: u64::MAX,
            js_api_prefix: ctx.connect.js_api.prefix(),
            ..ConsumerConfig::acking_all(stream, messages, crate::record::clock::now_ns())
        };
        let task = tokio::spawn(consume::run(client, config, progress.clone(), stop.clone()));
        Ok(Other {
            progress,
            stop,
            task,
        })
    }

    /// Waits until it has acked `stored` messages (or `deadline`), then stops it.
    pub async fn finish(self, stored: u64, deadline: Instant) -> OtherEnd {
        while self.progress.finished.load(Ordering::Relaxed) < stored
            && Instant::now() < deadline
            && !self.task.is_finished()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(e) => Err(format!("the consumer task failed: {e}")),
        }
    }
}
