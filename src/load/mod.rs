//! Load generation: open-loop publishers that are never the bottleneck they
//! measure.

mod publisher;

pub use publisher::{
    AckReport, MessageBuilder, Publisher, PublisherConfig, PublisherProgress, SendReport,
};
