//! The runtimes publishers' and consumers' connections and tasks run on,
//! apart from the run's own: each role's CPU can then be read from its
//! threads, and each can be given as many threads as a host allows.
//!
//! A publisher's sender is an OS thread of its own (see
//! [`crate::record::schedule::Pacer`]); its connection's socket I/O and, when
//! paced, its PubAck reader run on the publish runtime (threads named
//! `jsb-pub-io`). Consumer clients, their connections and their handlers
//! run on the consume runtime (`jsb-consume`). What is left on the main
//! runtime is the run's orchestration: progress, sampling, provisioning.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

/// Thread name of the publish runtime's workers.
pub const PUBLISH_THREADS: &str = "jsb-pub-io";
/// Thread name of the consume runtime's workers.
pub const CONSUME_THREADS: &str = "jsb-consume";

static SIZES: OnceLock<(usize, usize)> = OnceLock::new();
static PUBLISH: OnceLock<Runtime> = OnceLock::new();
static CONSUME: OnceLock<Runtime> = OnceLock::new();

/// Sets how many worker threads the publish and consume runtimes get
/// (`run --publisher-threads`, `--consumer-threads`); without it each
/// gets one per core. Only the first call counts, and only before either
/// runtime has started; returns whether it counted.
pub fn set_threads(publish: usize, consume: usize) -> bool {
    SIZES.set((publish.max(1), consume.max(1))).is_ok()
}

/// Worker threads each runtime has (or will have): publish, consume.
pub fn threads() -> (usize, usize) {
    *SIZES.get_or_init(threads_default)
}

/// One worker thread per core for each runtime.
pub fn threads_default() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores, cores)
}

fn build(name: &str, threads: usize) -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a runtime with valid settings builds")
}

/// The runtime publishers' connections and PubAck readers run on.
pub fn publish() -> &'static Handle {
    PUBLISH
        .get_or_init(|| build(PUBLISH_THREADS, threads().0))
        .handle()
}

/// The runtime consumer clients run on.
pub fn consume() -> &'static Handle {
    CONSUME
        .get_or_init(|| build(CONSUME_THREADS, threads().1))
        .handle()
}
