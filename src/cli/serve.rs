//! `jsbench server`: embedded nats-server(s) for manual use, their URLs
//! printed, until Ctrl-C; with `--leafnode`, a leaf server beside them.

use anyhow::Result;

use super::signals::{Interrupts, runtime};
use crate::server::leaf::{self, HUB_DOMAIN, LEAF_DOMAIN, LeafServer};
use crate::server::{EmbeddedCluster, EmbeddedServer, ServerOptions};
use crate::system::error::EXIT_OK;

pub fn command(cluster: Option<usize>, leafnode: bool) -> Result<i32> {
    let runtime = runtime()?;
    let mut interrupts = Interrupts::register(&runtime)?;
    let (options, hub_port) = if leafnode {
        let (options, port) = leaf::hub_options(&ServerOptions::default())?;
        (options, Some(port))
    } else {
        (ServerOptions::default(), None)
    };
    if let Some(size) = cluster {
        let cluster = EmbeddedCluster::start_with(size, &options)?;
        let leaf = start_leaf(hub_port)?;
        // One line, comma-separated: what -s and NATS_URL take.
        crate::system::stdout::outln!("{}", cluster.urls());
        for (name, node) in cluster.members() {
            eprintln!(
                "{name}: nats-server {} on {} (monitoring {})",
                node.version(),
                node.url(),
                node.monitor_url().unwrap_or("off")
            );
        }
        eprintln!(
            "cluster {} with {size} JetStream nodes and a meta leader; Ctrl-C stops them and removes their stores",
            cluster.name()
        );
        report_leaf(leaf.as_ref());
        runtime.block_on(interrupts.next());
        drop(leaf);
        drop(cluster);
        return Ok(EXIT_OK);
    }
    let server = EmbeddedServer::start_with(&options)?;
    let leaf = start_leaf(hub_port)?;
    crate::system::stdout::outln!("{}", server.url());
    eprintln!(
        "nats-server {} with JetStream on {} (monitoring {}); Ctrl-C stops it and removes its store",
        server.version(),
        server.url(),
        server.monitor_url().unwrap_or("off")
    );
    report_leaf(leaf.as_ref());
    runtime.block_on(interrupts.next());
    drop(leaf);
    drop(server);
    Ok(EXIT_OK)
}

fn start_leaf(hub_port: Option<u16>) -> Result<Option<LeafServer>> {
    hub_port
        .map(|port| LeafServer::start(port, None, &ServerOptions::default()))
        .transpose()
}

/// The leaf's URL on stdout (a second line, after the hub's), the rest on
/// stderr.
fn report_leaf(leaf: Option<&LeafServer>) {
    let Some(leaf) = leaf else { return };
    crate::system::stdout::outln!("{}", leaf.url());
    eprintln!(
        "leaf: nats-server on {} (monitoring {}), JetStream domain {LEAF_DOMAIN}, connected to \
         the hub (domain {HUB_DOMAIN}) through a relay on port {}",
        leaf.url(),
        leaf.server().monitor_url().unwrap_or("off"),
        leaf.relay().port().unwrap_or(0)
    );
}
