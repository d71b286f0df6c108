//! jsbench: throughput, latency and delivery-guarantee benchmarks for NATS
//! JetStream's reliable-delivery machinery.
//!
//! # Layout
//!
//! From the command line down to the wire:
//!
//! - [`cli`]: arguments into typed options; [`run`] orchestrates a run:
//!   profiles, server, scenarios, results, clean-up.
//! - [`profile`]: TOML profiles validated into a typed plan.
//! - [`server`]: the embedded nats-server and local cluster; [`target`]: which
//!   server a run measures; [`connect`]: connections to any server, as
//!   natscli's flags, variables and contexts describe them.
//! - [`scenario`]: one module per scenario, each reading as provision,
//!   drive, measure, verify. [`provision`] creates run-scoped streams and
//!   consumers; [`drive`] runs the publish-and-consume mechanics they share.
//!   [`replay`] holds what the replay scenario measures with: the recording,
//!   replay consumers and pacing fidelity. [`dlq`] is the advisory-built
//!   dead-letter pipeline, [`advisory`] parses and watches advisories.
//! - [`load`]: open-loop publishers ([`schedule`] keeps their timing);
//!   [`consume`]: durable consumers. Both record into task-local
//!   [`histogram`]s, [`ledger`]s and [`timeline`]s, merged after the run,
//!   timed by one [`clock`] and the payload [`stamp`].
//! - [`metrics`], [`results`], [`report`]: what a run leaves behind;
//!   [`spread`]: median and spread of repeated measurements;
//!   [`compare`]: two runs' results side by side, with a verdict.
//! - [`worker`]: `jsbench worker` and `run --workers N`: shares of each
//!   variant's drive on other processes and hosts, coordinated over NATS.
//! - [`progress`], [`error`]: the user-facing edges.

pub mod about;
pub mod advisory;
pub mod behaviour;
pub mod cli;
pub mod clock;
pub mod compare;
pub mod connect;
pub mod consume;
pub mod cpu;
pub mod dlq;
pub mod drive;
pub mod error;
pub mod fates;
pub mod fault;
pub mod histogram;
pub mod http;
pub mod ledger;
pub mod load;
pub mod metrics;
pub mod profile;
pub mod progress;
pub mod provision;
pub mod random;
pub mod readback;
pub mod replay;
pub mod report;
pub mod results;
pub mod run;
pub mod scenario;
pub mod schedule;
pub mod secret;
pub mod server;
pub mod spread;
pub mod stamp;
pub mod target;
pub mod timeline;
pub mod url;
pub mod variant;
pub mod worker;
