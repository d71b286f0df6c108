//! The process environment as natscli reads it, taken once.

use std::collections::BTreeMap;

/// A snapshot of the environment: the `NATS_*` variables, where natscli
/// keeps its contexts, and whatever a context's `$VAR` or `env://` refers
/// to. Taken once, so tests can hand in their own.
#[derive(Clone, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

impl std::fmt::Debug for Environment {
    /// Names only: the values include NATS_PASSWORD and friends.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Environment {
    pub fn from_process() -> Self {
        Environment {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        }
    }

    pub fn empty() -> Self {
        Self::default()
    }

    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.vars.insert(key.to_string(), value.to_string());
        self
    }

    /// A variable's value; empty counts as unset, as in natscli.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars
            .get(key)
            .map(|v| v.as_str())
            .filter(|v| !v.trim().is_empty())
    }
}
