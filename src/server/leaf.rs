//! A leafnode server jsbench starts beside its hub (the embedded server,
//! or node 1 of a local cluster), connected to it through a [`Relay`]
//! jsbench owns: the link can then be slowed to a bandwidth and a delay
//! ([`Shape`]), or paused, as a WAN link to an edge site would be, and a
//! copy made across it measured (the lag scenario's `leaf` variant).
//!
//! Each side names a JetStream domain ([`HUB_DOMAIN`], [`LEAF_DOMAIN`]),
//! so a stream on the leaf can mirror one on the hub through
//! `$JS.hub.API`. The leaf is an [`EmbeddedServer`] with its own store
//! and free ports on 127.0.0.1, stopped (and its store removed) on drop.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::Deserialize;

use super::relay::{Relay, Shape};
use super::{EmbeddedServer, Leafnodes, ServerOptions, poll};
use crate::system::http;

/// The hub's JetStream domain.
pub const HUB_DOMAIN: &str = "hub";
/// The leaf's JetStream domain.
pub const LEAF_DOMAIN: &str = "leaf";
/// The leaf server's name, as its hub's `/leafz` shows it.
pub const LEAF_NAME: &str = "jsbench-leaf";

/// The leaf a run reaches: its URL, its link's relay.
pub type LeafHandle = Arc<LeafServer>;

/// How a hub is started to take a leafnode: its domain and a free port
/// for leafnodes to connect to. Returns the options and that port.
pub fn hub_options(options: &ServerOptions) -> Result<(ServerOptions, u16)> {
    let port = free_port().context("finding a free loopback port for the hub's leafnodes")?;
    let hub = ServerOptions {
        domain: Some(HUB_DOMAIN.into()),
        leafnodes: Some(Leafnodes::Listen(port)),
        ..options.clone()
    };
    Ok((hub, port))
}

/// The leaf server and the relay its link to the hub runs through.
pub struct LeafServer {
    /// Dropped first: the leaf stops before its link closes, so it does
    /// not log a lost hub on the way out.
    server: EmbeddedServer,
    relay: Relay,
    hub_port: u16,
}

#[derive(Deserialize)]
struct Leafz {
    #[serde(default)]
    leafs: Vec<LeafInfo>,
}

/// One leafnode connection as `/leafz` reports it.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub struct LeafInfo {
    pub name: String,
    pub rtt: String,
    pub in_msgs: i64,
    pub out_msgs: i64,
    pub compression: String,
}

impl LeafServer {
    /// Starts a relay to the hub's leafnode port and a leaf server that
    /// connects through it, and waits until the leaf reports the link up.
    /// `ping_interval` sets the leaf's pings (all its connections: the
    /// server has one setting), for the stale-connection case.
    pub fn start(
        hub_port: u16,
        ping_interval: Option<Duration>,
        options: &ServerOptions,
    ) -> Result<Self> {
        let relay = Relay::loopback_to(hub_port).context("starting the leafnode link's relay")?;
        let relay_port = relay.port().context("the relay listens on TCP")?;
        let mut leaf_options = ServerOptions {
            jetstream: true,
            relay_routes: false,
            store_dir: None,
            domain: Some(LEAF_DOMAIN.into()),
            leafnodes: Some(Leafnodes::Remote {
                url: format!("nats-leaf://127.0.0.1:{relay_port}"),
                ping_interval,
            }),
            ..options.clone()
        };
        leaf_options
            .extra_args
            .extend(["--name".to_string(), LEAF_NAME.into()]);
        let server =
            EmbeddedServer::start_with(&leaf_options).context("starting the leaf server")?;
        let mut leaf = LeafServer {
            server,
            relay,
            hub_port,
        };
        leaf.wait_connected(options.ready_timeout)?;
        leaf.server.forget_startup_log();
        Ok(leaf)
    }

    /// Waits until the leaf's `/leafz` shows its connection to the hub.
    pub fn wait_connected(&self, timeout: Duration) -> Result<()> {
        let probe = || match self.links() {
            Ok(links) if !links.is_empty() => Ok(Ok(())),
            Ok(_) => Ok(Err("no leafnode connection yet".to_string())),
            Err(e) => Ok(Err(format!("{e:#}"))),
        };
        let timed_out = |last| {
            anyhow!(
                "the leaf server did not connect to the hub's leafnode port {} within \
                 {timeout:?} ({last}); its log ends with:\n{}",
                self.hub_port,
                self.server.log_tail(1500).trim_end()
            )
        };
        poll(timeout, Duration::from_millis(20), probe, timed_out)
    }

    /// The leaf's connections to its hub, from its `/leafz`.
    pub fn links(&self) -> Result<Vec<LeafInfo>> {
        let monitor = self
            .server
            .monitor_url()
            .context("the leaf server has no monitoring port")?;
        Ok(http::get_parsed::<Leafz>(monitor, "/leafz")?.leafs)
    }

    /// Slows the link both ways to `shape` (the default: as fast as
    /// loopback), on the open connection and any reconnection.
    pub fn shape(&self, shape: Shape) {
        self.relay.shape(shape);
    }

    /// The leaf's client URL.
    pub fn url(&self) -> &str {
        self.server.url()
    }

    pub fn server(&self) -> &EmbeddedServer {
        &self.server
    }

    /// The link's relay: shape it, pause it.
    pub fn relay(&self) -> &Relay {
        &self.relay
    }
}

/// A free loopback port, released for the server to take (another
/// process could take it first: the server then fails to start and says
/// so).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
