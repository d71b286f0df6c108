//! Load generation: open-loop publishers that are never the bottleneck they
//! measure, and reference publishers that prove it.

pub mod batch;
pub mod fast_batch;
mod publisher;
pub mod reference;
mod sizes;

pub use publisher::{
    AckReport, Composer, IdBuilder, MessageBuilder, Outgoing, Publisher, PublisherConfig,
    PublisherProgress, RetryPlan, SendReport, Timing,
};
pub use sizes::message_size;
