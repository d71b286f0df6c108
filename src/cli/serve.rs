//! `jsbench server`: embedded nats-server(s) for manual use, their URLs
//! printed, until Ctrl-C.

use anyhow::Result;

use super::signals::{Interrupts, runtime};
use crate::server::{EmbeddedCluster, EmbeddedServer};
use crate::system::error::EXIT_OK;

pub fn command(cluster: Option<usize>) -> Result<i32> {
    let runtime = runtime()?;
    let mut interrupts = Interrupts::register(&runtime)?;
    if let Some(size) = cluster {
        let cluster = EmbeddedCluster::start(size)?;
        // One line, comma-separated: what -s and NATS_URL take.
        println!("{}", cluster.urls());
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
        runtime.block_on(interrupts.next());
        drop(cluster);
        return Ok(EXIT_OK);
    }
    let server = EmbeddedServer::start()?;
    println!("{}", server.url());
    eprintln!(
        "nats-server {} with JetStream on {} (monitoring {}); Ctrl-C stops it and removes its store",
        server.version(),
        server.url(),
        server.monitor_url().unwrap_or("off")
    );
    runtime.block_on(interrupts.next());
    drop(server);
    Ok(EXIT_OK)
}
