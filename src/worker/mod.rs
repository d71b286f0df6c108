//! Load beyond one machine: workers that run shares of each variant, led
//! by the `jsbench run --workers N` that recruited them, over NATS itself.
//!
//! NATS is the control plane as well as the system under test, so a
//! worker needs nothing but the connection options `run` takes: no second
//! coordination service to deploy, secure or firewall.
//!
//! # Layout
//!
//! - [`protocol`]: subjects, messages and the version rule: what
//!   coordinator and workers say to each other.
//! - [`auth`]: every message sealed with the secret they share, so a
//!   worker obeys only its coordinator and a coordinator believes only
//!   its workers.
//! - [`clock`]: the NTP-style offset estimate that puts every worker's
//!   stamps on the coordinator's time base.
//! - [`coordinator`]: recruiting, the clock exchange, and leading a
//!   variant's drive ([`Crew`]).
//! - [`agent`]: the `jsbench worker` command, which follows ([`Orders`]).
//! - [`merge`]: what each process ran and counted, and how that reaches a
//!   variant's results.
//!
//! Workers are a layer above drive that composes its phases over NATS:
//! [`Workers`] implements [`crate::drive::Distribute`] (each variant split
//! into [`crate::drive::Share`]s), and the coordinator's [`Crew`] and a
//! worker's [`Orders`] implement [`crate::drive::Peers`] (t0, counts, the
//! end of publishing, the drain, the parts). Every scenario whose load goes
//! through [`crate::drive::drive`] gains workers without code of its own.
//! What cannot move (a server kill, a consumer crash) stays on the
//! coordinator, and the results say so.

pub mod agent;
pub mod auth;
pub mod clock;
pub mod coordinator;
pub mod merge;
pub mod protocol;

pub use agent::Orders;
pub use coordinator::{Crew, WorkerInfo, Workers};

/// A task that lives as long as its owner: dropping this aborts it.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A proof of life: `payload()` published to `subject` every `every`
/// until the returned guard is dropped (a tick without one is skipped).
fn beat(
    client: &async_nats::Client,
    subject: String,
    every: std::time::Duration,
    payload: impl Fn() -> Option<Vec<u8>> + Send + 'static,
) -> AbortOnDrop {
    let client = client.clone();
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if let Some(bytes) = payload() {
                let _ = client.publish(subject.clone(), bytes.into()).await;
            }
        }
    }))
}
