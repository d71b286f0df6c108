//! Connections to the server under test.
//!
//! Every publisher and consumer gets a connection of its own, as separate
//! processes would have, so that one socket's writer is never the
//! bottleneck being measured.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::{Client, ConnectOptions, ServerAddr};

use crate::error::UsageError;

/// Where and how to connect; built once from flags, env and profile.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    /// Server URLs (several for a cluster). Credentials embedded in a URL are
    /// taken out and passed as options: async-nats ignores them in the URL.
    servers: Vec<ServerAddr>,
    user: Option<(String, String)>,
    token: Option<String>,
    pub timeout: Duration,
    /// Connection-name prefix the server shows in `/connz`.
    pub name: String,
}

impl ConnectSettings {
    /// Parses a comma-separated list of URLs (`NATS_URL` style).
    pub fn new(urls: &str, timeout: Duration) -> Result<Self> {
        let mut servers = Vec::new();
        let mut user = None;
        let mut token = None;
        for raw in urls.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (clean, credentials) = split_credentials(raw);
            let addr: ServerAddr = clean
                .parse()
                .map_err(|e| UsageError(format!("invalid server URL {:?}: {e}", redact(raw))))?;
            match credentials {
                Some(Credentials::User(u, p)) => user = Some((u, p)),
                Some(Credentials::Token(t)) => token = Some(t),
                None => {}
            }
            servers.push(addr);
        }
        if servers.is_empty() {
            return Err(UsageError("no server URL given".into()).into());
        }
        Ok(ConnectSettings {
            servers,
            user,
            token,
            timeout,
            name: "jsbench".into(),
        })
    }

    /// The URLs with any credentials removed, for logs and results.
    pub fn display_urls(&self) -> String {
        self.servers
            .iter()
            .map(|s| s.clone().into_inner().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Opens one connection named `jsbench <role>`; fails within the connect
    /// timeout when no server answers.
    pub async fn connect(&self, role: &str) -> Result<Client> {
        let mut options = ConnectOptions::new()
            .name(format!("{} {role}", self.name))
            .connection_timeout(self.timeout)
            .request_timeout(Some(self.timeout.max(Duration::from_secs(5))));
        if let Some((user, pass)) = &self.user {
            options = options.user_and_password(user.clone(), pass.clone());
        }
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        let servers = self.servers.clone();
        // connection_timeout bounds each TCP attempt; the outer timeout bounds
        // the handshake too, so an address that accepts and stalls still fails.
        let attempt = tokio::time::timeout(self.timeout * 2, options.connect(servers)).await;
        match attempt {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(anyhow!(e))
                .with_context(|| format!("cannot connect to {}", self.display_urls())),
            Err(_) => Err(anyhow!(
                "cannot connect to {}: no answer within {:?}",
                self.display_urls(),
                self.timeout * 2
            )),
        }
    }
}

enum Credentials {
    User(String, String),
    Token(String),
}

/// Takes `user:pass@` or `token@` out of a URL.
fn split_credentials(url: &str) -> (String, Option<Credentials>) {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => {
            let info = &rest[..at];
            let clean = format!("{scheme}{}", &rest[at + 1..]);
            let credentials = match info.split_once(':') {
                Some((u, p)) => Credentials::User(u.to_string(), p.to_string()),
                None => Credentials::Token(info.to_string()),
            };
            (clean, Some(credentials))
        }
        None => (url.to_string(), None),
    }
}

/// A URL with its credentials replaced by `***`, safe to print and store.
pub fn redact(url: &str) -> String {
    match split_credentials(url) {
        (clean, Some(_)) => match clean.find("://") {
            Some(i) => format!("{}***@{}", &clean[..i + 3], &clean[i + 3..]),
            None => format!("***@{clean}"),
        },
        (clean, None) => clean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_credentials_out_of_urls() {
        let s = ConnectSettings::new("nats://alice:s3cret@127.0.0.1:4222", Duration::from_secs(1))
            .unwrap();
        assert_eq!(s.user, Some(("alice".into(), "s3cret".into())));
        assert!(!s.display_urls().contains("s3cret"), "{}", s.display_urls());

        let s = ConnectSettings::new("nats://tok@127.0.0.1:4222", Duration::from_secs(1)).unwrap();
        assert_eq!(s.token.as_deref(), Some("tok"));
    }

    #[test]
    fn comma_separated_urls_become_a_list() {
        let s = ConnectSettings::new(
            "nats://127.0.0.1:4222, nats://127.0.0.1:4223",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(s.servers.len(), 2);
    }

    #[test]
    fn redacts_for_display() {
        assert_eq!(redact("nats://u:p@h:1"), "nats://***@h:1");
        assert_eq!(redact("nats://h:1"), "nats://h:1");
    }

    #[test]
    fn bad_url_is_a_usage_error() {
        let err = ConnectSettings::new("nats://bad host:x", Duration::from_secs(1)).unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err:#}");
        assert!(ConnectSettings::new(" , ", Duration::from_secs(1)).is_err());
    }
}
