//! Profiles compiled into the binary, so `jsbench run quick` works from any
//! directory. Every file in profiles/ must be listed here (a test checks).

/// (name, TOML text) of every bundled profile.
pub const BUNDLED: &[(&str, &str)] = &[
    ("quick", include_str!("../../profiles/quick.toml")),
    ("default", include_str!("../../profiles/default.toml")),
    ("publish", include_str!("../../profiles/publish.toml")),
    ("dedup", include_str!("../../profiles/dedup.toml")),
    ("batches", include_str!("../../profiles/batches.toml")),
    ("ack", include_str!("../../profiles/ack.toml")),
    ("redelivery", include_str!("../../profiles/redelivery.toml")),
    (
        "backpressure",
        include_str!("../../profiles/backpressure.toml"),
    ),
    ("replay", include_str!("../../profiles/replay.toml")),
    ("faults", include_str!("../../profiles/faults.toml")),
    ("dlq", include_str!("../../profiles/dlq.toml")),
    ("staging", include_str!("../../profiles/staging.toml")),
    ("ci", include_str!("../../profiles/ci.toml")),
    ("workers", include_str!("../../profiles/workers.toml")),
    ("streams", include_str!("../../profiles/streams.toml")),
    ("fanout", include_str!("../../profiles/fanout.toml")),
    ("consumers", include_str!("../../profiles/consumers.toml")),
    ("routes", include_str!("../../profiles/routes.toml")),
    ("leafnode", include_str!("../../profiles/leafnode.toml")),
    ("search", include_str!("../../profiles/search.toml")),
    ("shapes", include_str!("../../profiles/shapes.toml")),
    ("outage", include_str!("../../profiles/outage.toml")),
    ("pacing", include_str!("../../profiles/pacing.toml")),
    ("soak", include_str!("../../profiles/soak.toml")),
    ("durability", include_str!("../../profiles/durability.toml")),
    ("power-r3", include_str!("../../profiles/power-r3.toml")),
    ("ttl", include_str!("../../profiles/ttl.toml")),
    ("filtered", include_str!("../../profiles/filtered.toml")),
    ("scheduled", include_str!("../../profiles/scheduled.toml")),
    ("priority", include_str!("../../profiles/priority.toml")),
    ("trace", include_str!("../../profiles/trace.toml")),
    (
        "hops-cluster",
        include_str!("../../profiles/hops-cluster.toml"),
    ),
    (
        "replication",
        include_str!("../../profiles/replication.toml"),
    ),
    (
        "replication-faults",
        include_str!("../../profiles/replication-faults.toml"),
    ),
];

pub fn bundled(name: &str) -> Option<&'static str> {
    BUNDLED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}
