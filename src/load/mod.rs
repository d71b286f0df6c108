//! Load generation: open-loop publishers that are never the bottleneck they
//! measure, and reference publishers that prove it.

mod arrivals;
mod publisher;
pub mod reference;
mod sizes;

pub use arrivals::{MAX_ARRIVALS, arrival_count, arrival_offsets};
pub use publisher::{
    AckReport, IdBuilder, MessageBuilder, Publisher, PublisherConfig, PublisherProgress, RetryPlan,
    SendReport, Timing,
};
pub use sizes::message_size;
