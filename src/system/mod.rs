//! The system ground: this build and host, CPU and memory meters, the
//! runtimes each role runs on, URLs and secrets, the small HTTP reader,
//! exit statuses, progress bars, the live counters behind
//! `--metrics-listen`, and the power-loss filesystem the durability checks
//! put a store on.

pub mod about;
pub mod cores;
pub mod cpu;
pub mod error;
pub mod http;
pub mod live;
pub mod metrics_http;
pub mod powerfs;
pub mod progress;
pub mod runtimes;
pub mod secret;
pub mod stdout;
pub mod url;
