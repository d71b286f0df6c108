//! Which client a publisher or a durable consumer runs on: jsbench's
//! direct connection ([`crate::wire`]) or async-nats. Publishers and
//! consumers offer the same three choices under one `client` key.

use serde::{Deserialize, Serialize};

/// The client a publisher sends through. The direct one (the sending
/// thread writes its own frames, [`crate::wire`]) costs a fraction of
/// async-nats' per-message wake-ups but speaks plain TCP only and does not
/// reconnect; `Auto` takes it wherever that cannot matter. Durable
/// consumers choose among the same three ([`super::ConsumerClient`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PublishClient {
    /// Direct unless the settings need TLS or the variant plans a fault
    /// (a server killed, cut or paused) that a reconnect must ride out.
    #[default]
    Auto,
    Direct,
    AsyncNats,
}

impl PublishClient {
    /// The client that publishes: `self`, with `Auto` resolved. A variant
    /// planning a fault or settings needing TLS keep async-nats; asked for
    /// `Direct` there (the plan refuses what it can see, so only TLS from
    /// the command line or a context gets here), an error says why.
    pub fn resolve(self, fault_planned: bool, tls: bool) -> anyhow::Result<PublishClient> {
        match self {
            PublishClient::AsyncNats => Ok(PublishClient::AsyncNats),
            PublishClient::Auto if fault_planned || tls => Ok(PublishClient::AsyncNats),
            PublishClient::Auto => Ok(PublishClient::Direct),
            PublishClient::Direct if tls => anyhow::bail!(
                "client = \"direct\": the connection settings require TLS, which the direct \
                 client does not speak; use \"auto\" or \"async-nats\""
            ),
            PublishClient::Direct if fault_planned => anyhow::bail!(
                "client = \"direct\": the variant plans a server fault and the direct client \
                 does not reconnect; use \"auto\" or \"async-nats\""
            ),
            PublishClient::Direct => Ok(PublishClient::Direct),
        }
    }

    /// As results name it (the publisher's `publisher_client` parameter,
    /// the client a consumer report says read).
    pub fn name(self) -> &'static str {
        match self {
            PublishClient::Auto => "auto",
            PublishClient::Direct => "direct",
            PublishClient::AsyncNats => "async-nats",
        }
    }
}
