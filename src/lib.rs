//! jsbench: throughput, latency and delivery-guarantee benchmarks for NATS
//! JetStream's reliable-delivery machinery.
//!
//! Comments name the two articles jsbench began from as "the delivery
//! article" (acks, BackOff, MaxDeliver, the advisory-built DLQ, replay)
//! and "the restarts article" (durable consumers surviving a crash);
//! docs/README.md, "Sources", gives their titles.
//!
//! # Layers
//!
//! The crate reads bottom-up; each module imports only from its own layer
//! and those below it, no imports run in a loop (between files neither),
//! and `tests/layers.rs` holds it to the table in docs/development.md.
//! From the wire up:
//!
//! 1. ground: [`record`], the hot-path recorders (histograms, the ledger,
//!    timelines) timed by one clock and the payload stamp, the open-loop
//!    schedule, named metrics and their spread; [`system`], CPU and memory
//!    meters, the runtimes, URLs and secrets, what this build is, exit
//!    statuses, progress bars and the live counters; [`units`], durations,
//!    percentages and byte counts as people write them.
//! 2. plan: [`profile`], TOML profiles validated into the typed plan.
//! 3. the outside world: the [`server`] under test (embedded, a local
//!    cluster, or the user's; the faults jsbench may inject into it, the
//!    relays its routes go through, its monitoring endpoints), the
//!    [`connect`]ions as natscli describes them (or, where the client's
//!    cost is cut, spoken directly on the [`wire`]), and the JetStream
//!    [`streams`] a run creates, reads back and hears advisories from.
//! 4. engines: open-loop publishers ([`load`]), durable consumers and what
//!    they do with deliveries ([`consume`]), the advisory-built
//!    dead-letter pipeline ([`dlq`]), replay readers and pacing
//!    ([`replay`]).
//! 5. [`drive`]: one variant's load, in phases every scenario shares; and
//!    what a [`variant`] produced.
//! 6. [`worker`]: `jsbench worker` and `run --workers N`, drive's phases
//!    composed over NATS on other processes and hosts.
//! 7. [`scenario`]: one folder per scenario kind holding only what is its
//!    own (its plan, its variants, and for one variant provision, drive,
//!    measure, verify), on one lifecycle every kind shares.
//! 8. what a run leaves behind: [`results`], [`report`], [`compare`], the
//!    paired comparisons of [`ab`], and the trends over commits of
//!    [`history`].
//! 9. [`run`]: profiles, server, scenarios, results, clean-up.
//! 10. [`cli`]: arguments into typed options, and exit statuses.

pub mod ab;
pub mod cli;
pub mod compare;
pub mod connect;
pub mod consume;
pub mod dlq;
pub mod drive;
pub mod history;
pub mod load;
pub mod profile;
pub mod record;
pub mod replay;
pub mod report;
pub mod results;
pub mod run;
pub mod scenario;
pub mod server;
pub mod streams;
pub mod system;
pub mod units;
pub mod variant;
pub mod wire;
pub mod worker;
