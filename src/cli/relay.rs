//! `jsbench relay`: one loopback relay jsbench can cut or pause, for a
//! worker in a network namespace of its own.

use anyhow::{Context, Result};

use super::signals::{Interrupts, runtime};
use crate::server::relay::{Endpoint, Relay};
use crate::system::error::EXIT_OK;

pub fn command(listen: Endpoint, to: Endpoint) -> Result<i32> {
    let runtime = runtime()?;
    let mut interrupts = Interrupts::register(&runtime)?;
    let relay = Relay::start(listen.clone(), to.clone())
        .with_context(|| format!("listening on {listen:?}"))?;
    eprintln!("relaying {:?} to {to:?}; Ctrl-C stops it", relay.listen());
    runtime.block_on(interrupts.next());
    drop(relay);
    Ok(EXIT_OK)
}
