//! Secrets (passwords, tokens, keys) that no log line, error or results
//! file may carry.

use std::fmt;

/// A password, token or key: compared and cloned like a string, but shown
/// as `***` by `Debug`, so no log line or error can carry it by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it to the server.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}
