//! `jsbench profiles`: the bundled profiles listed, or one printed as a
//! starting point.

use std::time::Duration;

use anyhow::Result;

use crate::profile::{self, BUNDLED, format_duration};
use crate::scenario;
use crate::system::error::{EXIT_OK, UsageError};

pub fn command(name: Option<&str>) -> Result<i32> {
    if let Some(name) = name {
        let text = profile::bundled(name).ok_or_else(|| {
            let names: Vec<&str> = BUNDLED.iter().map(|(n, _)| *n).collect();
            UsageError(format!(
                "no bundled profile named {name:?}; bundled: {}",
                names.join(", ")
            ))
        })?;
        crate::system::stdout::out!("{text}");
        return Ok(EXIT_OK);
    }
    let width = BUNDLED.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, text) in BUNDLED {
        let p = scenario::parse(name, text)?;
        let mut kinds: Vec<&str> = p.scenarios.iter().map(|s| s.kind()).collect();
        kinds.dedup();
        crate::system::stdout::outln!(
            "{name:<width$}  ~{:>5}  {:<12}  {}",
            format_duration(Duration::from_secs(
                scenario::estimated_duration(&p).as_secs()
            )),
            kinds.join(","),
            p.description
        );
    }
    Ok(EXIT_OK)
}
