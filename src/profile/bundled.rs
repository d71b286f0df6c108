//! Profiles compiled into the binary, so `jsbench run quick` works from any
//! directory: every file in profiles/, listed by build.rs.

/// (name, TOML text) of every bundled profile, by name.
pub const BUNDLED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

pub fn bundled(name: &str) -> Option<&'static str> {
    BUNDLED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}
