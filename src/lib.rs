//! jsbench: throughput, latency and delivery-guarantee benchmarks for NATS
//! JetStream's reliable-delivery machinery.
//!
//! # Layers
//!
//! The crate reads bottom-up; each module imports only from its own layer
//! and those below it, and `tests/layers.rs` holds it to the table in
//! docs/development.md. From the wire up:
//!
//! 1. ground: the hot-path recorders [`histogram`], [`ledger`] and
//!    [`timeline`], timed by one [`clock`] and the payload [`stamp`]; the
//!    open-loop [`schedule`]; [`random`]; [`metrics`] and their [`spread`];
//!    [`cpu`] meters; [`http`], [`url`], [`secret`]; [`about`] this build;
//!    [`error`] and [`progress`], the user-facing edges.
//! 2. plan: [`profile`], TOML profiles validated into the typed plan.
//! 3. the outside world: the embedded [`server`] and cluster, the servers a
//!    run may kill ([`fault`]), which server a run measures ([`target`]),
//!    [`connect`]ions as natscli describes them, and run-scoped streams and
//!    consumers ([`provision`]).
//! 4. engines: open-loop publishers ([`load`]), durable consumers
//!    ([`consume`]) and what they do with deliveries ([`behaviour`],
//!    [`fates`]), the advisory-built dead-letter pipeline ([`dlq`]), replay
//!    readers and pacing ([`replay`]), [`advisory`] watchers, [`readback`].
//! 5. [`drive`]: one variant's load, in phases every scenario shares; and
//!    what a [`variant`] produced.
//! 6. [`worker`]: `jsbench worker` and `run --workers N`, drive's phases
//!    composed over NATS on other processes and hosts.
//! 7. [`scenario`]: one module per scenario, each reading as provision,
//!    drive, measure, verify.
//! 8. what a run leaves behind: [`results`], [`report`], and [`compare`].
//! 9. [`run`]: profiles, server, scenarios, results, clean-up.
//! 10. [`cli`]: arguments into typed options, and exit statuses.

pub mod ab;
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
pub mod live;
pub mod load;
pub mod metrics;
pub mod profile;
pub mod progress;
pub mod provision;
pub mod random;
pub mod readback;
pub mod relay;
pub mod replay;
pub mod report;
pub mod results;
pub mod run;
pub mod runtimes;
pub mod scenario;
pub mod schedule;
pub mod secret;
pub mod server;
pub mod spread;
pub mod stamp;
pub mod tally;
pub mod target;
pub mod telemetry;
pub mod timeline;
pub mod url;
pub mod variant;
pub mod worker;
