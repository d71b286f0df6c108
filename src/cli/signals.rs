//! The runtime every command runs on, and the signals that end it.

use anyhow::{Context, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::system::error::EXIT_INTERRUPTED;

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("jsb-worker")
        .build()?)
}

/// The runtime, with Ctrl-C and SIGTERM watched ([`Interrupts::watch`]):
/// the first cancels the token returned.
pub fn interruptible() -> Result<(tokio::runtime::Runtime, CancellationToken)> {
    let runtime = runtime()?;
    let stop = CancellationToken::new();
    let interrupts = Interrupts::register(&runtime)?;
    runtime.spawn(interrupts.watch(stop.clone()));
    Ok((runtime, stop))
}

/// Ctrl-C (SIGINT) and SIGTERM, registered before any work starts so that
/// no early signal kills jsbench with its server half-stopped.
pub struct Interrupts {
    int: Signal,
    term: Signal,
}

impl Interrupts {
    pub fn register(runtime: &tokio::runtime::Runtime) -> Result<Self> {
        runtime.block_on(async {
            Ok(Interrupts {
                int: signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?,
                term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            })
        })
    }

    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }

    /// First signal: stop measuring, write results, clean up. Second: give
    /// up now, but not on the power-loss mounts: an exit runs no
    /// destructors, and a FUSE mount whose process is gone stays mounted.
    pub async fn watch(mut self, stop: CancellationToken) {
        self.next().await;
        eprintln!("\ninterrupted: finishing up and writing results (Ctrl-C again to abort)");
        stop.cancel();
        self.next().await;
        crate::system::powerfs::abandon_all();
        std::process::exit(EXIT_INTERRUPTED);
    }
}
