//! A log of deliveries for scenarios that study redelivery: one compact
//! record per delivery, kept per consumer task and merged after the run, so
//! that delivery *n* and *n+1* of a sequence can be paired even when two
//! consumer clients received them.

/// One delivery and when the consumer answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryEvent {
    pub seq: u64,
    /// The server's delivery count (1 for the first delivery).
    pub delivery: u32,
    pub consumer: u16,
    /// When the server stored the message (its metadata timestamp), the
    /// earliest it can have been delivered.
    pub published_ns: u64,
    pub received_ns: u64,
    /// When the consumer sent its answer (ack, nak, term); the receive time
    /// for a delivery it ignored.
    pub answered_ns: u64,
}

/// Merges logs and orders them by sequence, then delivery.
pub fn merge(logs: Vec<Vec<DeliveryEvent>>) -> Vec<DeliveryEvent> {
    let mut all: Vec<DeliveryEvent> = logs.into_iter().flatten().collect();
    all.sort_unstable_by_key(|e| (e.seq, e.delivery, e.received_ns));
    all
}
