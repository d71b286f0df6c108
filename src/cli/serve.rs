//! `jsbench server`: embedded nats-server(s) for manual use, their URLs
//! printed, until Ctrl-C; with `--leafnode`, a leaf server beside them.

use std::any::Any;

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
    // The servers (stopped, their stores removed, when dropped), their
    // URLs (one line, comma-separated: what -s and NATS_URL take) and what
    // stderr says of them.
    let (servers, urls, notes): (Box<dyn Any>, String, Vec<String>) = match cluster {
        Some(size) => {
            let cluster = EmbeddedCluster::start_with(size, &options)?;
            let mut notes: Vec<String> = cluster
                .members()
                .map(|(name, node)| {
                    format!(
                        "{name}: nats-server {} on {} (monitoring {})",
                        node.version(),
                        node.url(),
                        node.monitor_url().unwrap_or("off")
                    )
                })
                .collect();
            notes.push(format!(
                "cluster {} with {size} JetStream nodes and a meta leader; Ctrl-C stops them and removes their stores",
                cluster.name()
            ));
            let urls = cluster.urls();
            (Box::new(cluster), urls, notes)
        }
        None => {
            let server = EmbeddedServer::start_with(&options)?;
            let note = format!(
                "nats-server {} with JetStream on {} (monitoring {}); Ctrl-C stops it and removes its store",
                server.version(),
                server.url(),
                server.monitor_url().unwrap_or("off")
            );
            let url = server.url().to_string();
            (Box::new(server), url, vec![note])
        }
    };
    let leaf = hub_port
        .map(|port| LeafServer::start(port, None, &ServerOptions::default()))
        .transpose()?;
    crate::system::stdout::outln!("{urls}");
    for note in notes {
        eprintln!("{note}");
    }
    // The leaf's URL on stdout (a second line, after the hub's), the rest
    // on stderr.
    if let Some(leaf) = &leaf {
        crate::system::stdout::outln!("{}", leaf.url());
        eprintln!(
            "leaf: nats-server on {} (monitoring {}), JetStream domain {LEAF_DOMAIN}, connected to \
             the hub (domain {HUB_DOMAIN}) through a relay on port {}",
            leaf.url(),
            leaf.server().monitor_url().unwrap_or("off"),
            leaf.relay().port().unwrap_or(0)
        );
    }
    runtime.block_on(interrupts.next());
    drop(leaf);
    drop(servers);
    Ok(EXIT_OK)
}
