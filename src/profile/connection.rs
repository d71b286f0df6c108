//! `[connection]`: a profile may say which server it is meant for (a
//! staging profile names the staging context), with natscli's context
//! field names. Flags and environment variables still override it.
//!
//! A profile's text is copied into every results folder, so it may name
//! files that hold secrets (`creds`, `nkey`, `key`) but never hold one:
//! `password`, `token` and credentials inside a URL are refused.

use serde::Deserialize;

use std::time::Duration;

use super::problems::Problems;
use crate::system::url;
use crate::units::Dur;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionSection {
    context: Option<String>,
    url: Option<UrlList>,
    user: Option<String>,
    /// Accepted only to be refused with a reason.
    password: Option<toml::Value>,
    /// Accepted only to be refused with a reason.
    token: Option<toml::Value>,
    creds: Option<String>,
    nkey: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    ca: Option<String>,
    tls_first: Option<bool>,
    timeout: Option<Dur>,
    connection_name: Option<String>,
    jetstream_domain: Option<String>,
}

/// `url = "nats://a:4222"`, `url = "nats://a:4222,nats://b:4222"` or
/// `url = ["nats://a:4222", "nats://b:4222"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum UrlList {
    One(String),
    Many(Vec<String>),
}

const SECRET_RULE: &str = "secrets do not belong in a profile: its text is copied into every \
    results folder; use --password/--token, NATS_PASSWORD/NATS_TOKEN, a creds file or a context";

impl ConnectionSection {
    pub fn validate(&self, problems: &mut Problems) -> ConnectionPlan {
        for (key, set) in [
            ("password", self.password.is_some()),
            ("token", self.token.is_some()),
        ] {
            if set {
                problems.push(format!("connection.{key}"), SECRET_RULE);
            }
        }
        let url = self.url.as_ref().map(|u| match u {
            UrlList::One(s) => s.clone(),
            UrlList::Many(list) => list.join(","),
        });
        if let Some(text) = &url {
            match url::parse_list(text, "connection.url") {
                Ok(list) => {
                    if list.iter().any(|u| u.credentials.is_some()) {
                        problems.push("connection.url", SECRET_RULE);
                    }
                }
                Err(e) => problems.push("connection.url", e.0),
            }
        }
        for (key, value) in [
            ("context", &self.context),
            ("user", &self.user),
            ("creds", &self.creds),
            ("nkey", &self.nkey),
            ("cert", &self.cert),
            ("key", &self.key),
            ("ca", &self.ca),
            ("connection_name", &self.connection_name),
            ("jetstream_domain", &self.jetstream_domain),
        ] {
            if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
                let why = "must not be empty; leave the key out instead";
                problems.push(format!("connection.{key}"), why);
            }
        }
        if self.cert.is_some() != self.key.is_some() {
            let (given, missing) = if self.cert.is_some() {
                ("cert", "key")
            } else {
                ("key", "cert")
            };
            problems.push(
                format!("connection.{given}"),
                format!("a client certificate needs both cert and key; add connection.{missing}"),
            );
        }
        if let Some(why) = self.jetstream_domain.as_deref().and_then(domain_problem) {
            problems.push("connection.jetstream_domain", why);
        }
        let timeout = self.timeout.map(|d| d.0);
        if let Some(t) = timeout {
            problems.seconds("connection.timeout", t, 0.1, 600.0);
        }
        ConnectionPlan {
            context: self.context.clone(),
            url,
            user: self.user.clone(),
            creds: self.creds.clone(),
            nkey: self.nkey.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.ca.clone(),
            tls_first: self.tls_first,
            timeout,
            connection_name: self.connection_name.clone(),
            jetstream_domain: self.jetstream_domain.clone(),
        }
    }
}

/// What is wrong with a JetStream domain, if anything: it becomes a
/// subject token (`$JS.<domain>.API`).
pub fn domain_problem(domain: &str) -> Option<String> {
    let bad = |c: char| c.is_whitespace() || matches!(c, '.' | '*' | '>');
    domain
        .contains(bad)
        .then(|| format!("{domain:?}: a JetStream domain may not contain spaces, '.', '*' or '>'"))
}

/// A profile's `[connection]`, with natscli's context field names; paths
/// are expanded (`~`, `$VAR`) when the connection is resolved. Never holds
/// a secret.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionPlan {
    pub context: Option<String>,
    /// Comma-separated.
    pub url: Option<String>,
    pub user: Option<String>,
    pub creds: Option<String>,
    pub nkey: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ca: Option<String>,
    pub tls_first: Option<bool>,
    pub timeout: Option<Duration>,
    pub connection_name: Option<String>,
    pub jetstream_domain: Option<String>,
}
