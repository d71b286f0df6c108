//! Connections to the server under test.
//!
//! Every publisher and consumer gets a connection of its own, as separate
//! processes would have, so that one socket's writer is never the
//! bottleneck being measured. Settings arrive the way NATS users give them
//! to every other NATS tool (see [`options`]); secrets stay inside
//! [`Secret`] and never reach a message, a log or a results file.

pub mod context;
pub mod environment;
pub mod options;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::{Client, ConnectErrorKind, ConnectOptions, ServerAddr, jetstream};
use serde::{Deserialize, Serialize};

pub use crate::system::secret::Secret;
use crate::system::url;
pub use crate::system::url::redact;
pub use environment::Environment;
pub use options::{ConnectionFlags, ConnectionRequest, Resolution, resolve, resolve_all};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    pub version: String,
    pub cluster: Option<String>,
    /// Client URL, for nodes jsbench started.
    #[serde(default)]
    pub url: Option<String>,
}

/// The connection's settings as far as they explain a number: which
/// servers, what kind of authentication, whether TLS was on; and where each
/// setting came from (flag, environment variable, profile, context).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionInfo {
    /// Credentials removed.
    pub urls: String,
    /// none, user/password, token, creds or nkey.
    pub auth: String,
    pub tls: bool,
    pub tls_first: bool,
    pub context: Option<String>,
    pub jetstream_domain: Option<String>,
    pub connection_name: String,
    /// Setting -> where it came from, e.g. "url" -> "context staging".
    pub sources: BTreeMap<String, String>,
}

/// How the client proves who it is; one method per connection, as natscli
/// picks one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Auth {
    #[default]
    None,
    UserPassword {
        user: String,
        password: Secret,
    },
    Token(Secret),
    /// A creds file: user JWT and seed; read once, when settings resolve.
    Creds {
        path: PathBuf,
        contents: Secret,
    },
    /// A user nkey seed read from a file.
    Nkey {
        path: PathBuf,
        seed: Secret,
    },
}

impl Auth {
    pub fn kind(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::UserPassword { .. } => "user/password",
            Auth::Token(_) => "token",
            Auth::Creds { .. } => "creds",
            Auth::Nkey { .. } => "nkey",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    /// Refuse a plaintext connection (any TLS option or a `tls://` URL).
    pub required: bool,
    /// TLS before the server's INFO (`handshake_first` servers).
    pub first: bool,
    /// CA to trust instead of the system roots.
    pub ca: Option<PathBuf>,
    /// Client certificate and key for servers that verify clients.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// Which JetStream API the streams are reached through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum JsApi {
    #[default]
    Default,
    Domain(String),
    Prefix(String),
}

impl JsApi {
    /// The API subject prefix, `$JS.API` unless a domain or prefix is set.
    pub fn prefix(&self) -> String {
        match self {
            JsApi::Default => "$JS.API".into(),
            JsApi::Domain(d) => format!("$JS.{d}.API"),
            JsApi::Prefix(p) => p.clone(),
        }
    }
}

/// Refusals kept between two reads: the first few say why; a flood of
/// one violation per publish would say nothing more.
pub const MAX_REFUSALS: usize = 8;

/// Where and how to connect; resolved once from flags, environment,
/// profile and context.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    servers: Vec<ServerAddr>,
    /// The URLs without credentials, for messages and results.
    display: Vec<String>,
    pub auth: Auth,
    pub tls: TlsSettings,
    pub timeout: Duration,
    /// Connection-name prefix the server shows in `/connz`.
    pub name: String,
    pub js_api: JsApi,
    pub inbox_prefix: Option<String>,
    /// The natscli context used, if any.
    pub context: Option<String>,
    /// Setting -> where it came from ("url" -> "--server").
    pub sources: BTreeMap<String, String>,
    /// Servers the connections landed on, shared by every clone.
    seen: Arc<Mutex<BTreeMap<String, NodeInfo>>>,
    /// Each connection's role and the server it first landed on, in
    /// connect order: on a cluster, which clients a node's fault cuts off.
    attached: Arc<Mutex<Vec<(String, String)>>>,
    /// What servers refused on any connection of these settings: a denied
    /// publish or API request reaches its sender only as a timeout, and the
    /// reason only as an asynchronous `-ERR`.
    refusals: Arc<Mutex<Vec<String>>>,
    /// When connections of these settings dropped and came back: a server
    /// restart is measured from the clients' side with these.
    links: Arc<Mutex<LinkEvents>>,
    /// Only the servers listed: those the cluster announces are not tried
    /// ([`ConnectSettings::avoiding`]).
    listed_only: bool,
}

/// Disconnect and (re)connect times, [`crate::record::clock`] nanoseconds, the
/// first [`MAX_LINK_EVENTS`] of each.
#[derive(Debug, Clone, Default)]
pub struct LinkEvents {
    pub disconnected_ns: Vec<u64>,
    pub connected_ns: Vec<u64>,
}

/// Enough for every connection of a run to drop and return a few times.
const MAX_LINK_EVENTS: usize = 4096;

impl PartialEq for ConnectSettings {
    /// Same target and same identity; where each came from does not matter.
    fn eq(&self, other: &Self) -> bool {
        self.display == other.display
            && self.auth == other.auth
            && self.tls == other.tls
            && self.timeout == other.timeout
            && self.name == other.name
            && self.js_api == other.js_api
            && self.inbox_prefix == other.inbox_prefix
    }
}

impl ConnectSettings {
    /// Plain URLs, no credentials beyond those inside them (the embedded
    /// server, tests). Parses a comma-separated list.
    pub fn new(urls: &str, timeout: Duration) -> Result<Self> {
        let parsed = url::parse_list(urls, "the server URL")?;
        let mut settings = Self::from_parsed(parsed, timeout);
        if let Some(credentials) = settings_credentials(urls) {
            settings.auth = credentials;
        }
        Ok(settings)
    }

    fn from_parsed(parsed: Vec<url::ParsedUrl>, timeout: Duration) -> Self {
        let required = parsed.iter().any(url::wants_tls);
        ConnectSettings {
            display: parsed.iter().map(|u| u.display.clone()).collect(),
            servers: parsed.into_iter().map(|u| u.addr).collect(),
            auth: Auth::None,
            tls: TlsSettings {
                required,
                ..Default::default()
            },
            timeout,
            name: "jsbench".into(),
            js_api: JsApi::Default,
            inbox_prefix: None,
            context: None,
            sources: BTreeMap::new(),
            seen: Arc::default(),
            attached: Arc::default(),
            refusals: Arc::default(),
            links: Arc::default(),
            listed_only: false,
        }
    }

    /// These settings without the server at `url`, and without the servers
    /// a cluster announces: clients that must stay off one node (the node a
    /// fault cuts off) connect to, and reconnect to, the others only. Every
    /// record (landings, refusals, link events) stays shared with `self`.
    pub fn avoiding(&self, url: &str) -> Result<Self> {
        let avoided = url::parse_list(url, "the server to avoid")?;
        let same = |a: &ServerAddr| {
            avoided
                .iter()
                .any(|u| u.addr.host() == a.host() && u.addr.port() == a.port())
        };
        let kept: Vec<usize> = (0..self.servers.len())
            .filter(|&i| !same(&self.servers[i]))
            .collect();
        if kept.len() == self.servers.len() {
            return Err(anyhow!(
                "{url} is none of the servers connected to ({})",
                self.display_urls()
            ));
        }
        if kept.is_empty() {
            return Err(anyhow!(
                "avoiding {url} leaves no server to connect to ({})",
                self.display_urls()
            ));
        }
        let mut settings = self.clone();
        settings.servers = kept.iter().map(|&i| self.servers[i].clone()).collect();
        settings.display = kept.iter().map(|&i| self.display[i].clone()).collect();
        settings.listed_only = true;
        Ok(settings)
    }

    /// The URLs with any credentials removed, for logs and results.
    pub fn display_urls(&self) -> String {
        self.display.join(",")
    }

    /// One line for the terminal: where, as whom (never with what secret),
    /// and from which sources.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.context {
            parts.push(format!("context {c}"));
        }
        match &self.auth {
            Auth::None => {}
            Auth::UserPassword { user, .. } => parts.push(format!("user {user}")),
            other => parts.push(other.kind().to_string()),
        }
        if self.tls.required {
            parts.push(if self.tls.first { "TLS first" } else { "TLS" }.into());
        }
        if let JsApi::Domain(d) = &self.js_api {
            parts.push(format!("JetStream domain {d}"));
        }
        if parts.is_empty() {
            self.display_urls()
        } else {
            format!("{} ({})", self.display_urls(), parts.join(", "))
        }
    }

    /// What the results record about the connection: kinds and origins,
    /// never secrets or file contents.
    pub fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            urls: self.display_urls(),
            auth: self.auth.kind().into(),
            tls: self.tls.required,
            tls_first: self.tls.first,
            context: self.context.clone(),
            jetstream_domain: match &self.js_api {
                JsApi::Domain(d) => Some(d.clone()),
                _ => None,
            },
            connection_name: self.name.clone(),
            sources: self.sources.clone(),
        }
    }

    /// Each connection's role (`publisher-0`, `consumer-1`) and the server
    /// it first landed on, the last `n` connected.
    pub fn attached(&self, n: usize) -> Vec<(String, String)> {
        let all = self.attached.lock().expect("not poisoned");
        all[all.len().saturating_sub(n)..].to_vec()
    }

    /// Every server a connection of these settings has landed on so far.
    pub fn seen_servers(&self) -> Vec<NodeInfo> {
        self.seen
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// Who connects, for messages: never a secret.
    pub fn who(&self) -> String {
        match &self.auth {
            Auth::None => "a connection without credentials".into(),
            Auth::UserPassword { user, .. } => format!("user {user}"),
            other => format!("the {} identity", other.kind()),
        }
    }

    /// The distinct errors servers sent since the last call (permission
    /// violations above all), oldest first; at most [`MAX_REFUSALS`] kept.
    pub fn take_refusals(&self) -> Vec<String> {
        std::mem::take(&mut *self.refusals.lock().expect("not poisoned"))
    }

    /// Every disconnect and connect so far.
    pub fn link_events(&self) -> LinkEvents {
        self.links.lock().expect("not poisoned").clone()
    }

    /// A JetStream context on `client` for the configured domain or prefix.
    pub fn jetstream(&self, client: Client) -> jetstream::Context {
        match &self.js_api {
            JsApi::Default => jetstream::new(client),
            JsApi::Domain(d) => jetstream::with_domain(client, d),
            JsApi::Prefix(p) => jetstream::with_prefix(client, p),
        }
    }

    fn options(&self, role: &str) -> Result<ConnectOptions> {
        let mut options = ConnectOptions::new()
            .name(format!("{} {role}", self.name))
            .connection_timeout(self.timeout)
            .request_timeout(Some(self.timeout.max(Duration::from_secs(5))))
            .reconnect_delay_callback(reconnect_delay);
        let (refusals, links) = (self.refusals.clone(), self.links.clone());
        options = options.event_callback(move |event| {
            match event {
                async_nats::Event::ServerError(async_nats::ServerError::Other(text)) => {
                    keep_refusal(&refusals, &text)
                }
                async_nats::Event::Disconnected | async_nats::Event::Connected => {
                    let now = crate::record::clock::now_ns();
                    let mut links = links.lock().expect("not poisoned");
                    let list = if matches!(event, async_nats::Event::Connected) {
                        &mut links.connected_ns
                    } else {
                        &mut links.disconnected_ns
                    };
                    if list.len() < MAX_LINK_EVENTS {
                        list.push(now);
                    }
                }
                _ => {}
            }
            std::future::ready(())
        });
        options = match &self.auth {
            Auth::None => options,
            Auth::UserPassword { user, password } => {
                options.user_and_password(user.clone(), password.expose().to_string())
            }
            Auth::Token(token) => options.token(token.expose().to_string()),
            Auth::Creds { path, contents } => options
                .credentials(contents.expose())
                .map_err(|e| anyhow!("{} is not a NATS credentials file: {e}", path.display()))?,
            Auth::Nkey { seed, .. } => options.nkey(seed.expose().to_string()),
        };
        if self.tls.required {
            options = options.require_tls(true);
        }
        if self.tls.first {
            options = options.tls_first();
        }
        if let Some(ca) = &self.tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.tls.client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if let Some(prefix) = &self.inbox_prefix {
            options = options.custom_inbox_prefix(prefix);
        }
        if self.listed_only {
            options = options.ignore_discovered_servers();
        }
        Ok(options)
    }

    /// Opens one connection named `<name> <role>`; fails within the connect
    /// timeout when no server answers, and says plainly when the server
    /// refused the credentials or the certificate.
    /// Connects with the connection's task on `runtime`: its socket I/O
    /// then runs (and is counted) on that runtime's threads, not the
    /// caller's.
    pub async fn connect_on(&self, runtime: &tokio::runtime::Handle, role: &str) -> Result<Client> {
        let (settings, role) = (self.clone(), role.to_string());
        runtime
            .spawn(async move { settings.connect(&role).await })
            .await
            .context("joining a connect task")?
    }

    pub async fn connect(&self, role: &str) -> Result<Client> {
        let options = self.options(role)?;
        let servers = self.servers.clone();
        // connection_timeout bounds each TCP attempt; the outer timeout bounds
        // the handshake too, so an address that accepts and stalls still fails.
        let attempt = tokio::time::timeout(self.timeout * 2, options.connect(servers)).await;
        match attempt {
            Ok(Ok(client)) => {
                let info = client.server_info();
                self.note_attached(
                    role,
                    &NodeInfo {
                        name: info.server_name.clone(),
                        version: info.version.clone(),
                        cluster: info.cluster.clone(),
                        url: None,
                    },
                );
                Ok(client)
            }
            Ok(Err(e)) => Err(self.explain(&e)),
            Err(_) => Err(anyhow!(
                "cannot connect to {}: no answer within {:?}",
                self.display_urls(),
                self.timeout * 2
            )),
        }
    }

    /// Records that `role` landed on `node`: the async-nats connections and
    /// the direct ones ([`crate::wire`]) alike.
    pub fn note_attached(&self, role: &str, node: &NodeInfo) {
        self.attached
            .lock()
            .expect("not poisoned")
            .push((role.to_string(), node.name.clone()));
        self.seen
            .lock()
            .expect("not poisoned")
            .insert(node.name.clone(), node.clone());
    }

    /// Keeps a server's refusal (an asynchronous `-ERR`) a direct
    /// connection read, as the async-nats connections' event callback does.
    pub fn note_refusal(&self, text: &str) {
        keep_refusal(&self.refusals, text);
    }

    /// The servers to try, in order.
    pub fn servers(&self) -> &[ServerAddr] {
        &self.servers
    }

    /// Turns a connect error into advice that names the setting to check.
    fn explain(&self, e: &async_nats::ConnectError) -> anyhow::Error {
        let urls = self.display_urls();
        let origin = |keys: &[&str]| {
            let found: Vec<String> = keys
                .iter()
                .filter_map(|k| self.sources.get(*k).cloned())
                .collect();
            if found.is_empty() {
                String::new()
            } else {
                format!(" (from {})", found.join(", "))
            }
        };
        let detail = error_chain(e);
        match e.kind() {
            ConnectErrorKind::AuthorizationViolation => {
                let what = match &self.auth {
                    Auth::None => {
                        "the server requires authentication and none was given; use --user/--password, \
                         --token, --creds, --nkey or a --context"
                            .to_string()
                    }
                    Auth::UserPassword { user, .. } => format!(
                        "the server rejected user {user:?} and its password{}",
                        origin(&["user", "password"])
                    ),
                    Auth::Token(_) => {
                        format!("the server rejected the token{}", origin(&["token"]))
                    }
                    Auth::Creds { path, .. } => format!(
                        "the server rejected the credentials in {}{}",
                        path.display(),
                        origin(&["creds"])
                    ),
                    Auth::Nkey { path, .. } => format!(
                        "the server rejected the nkey in {}{}",
                        path.display(),
                        origin(&["nkey"])
                    ),
                };
                anyhow!("cannot connect to {urls}: authorization violation: {what}")
            }
            ConnectErrorKind::Authentication => anyhow!(
                "cannot connect to {urls}: could not sign the server's challenge with the {} key: {detail}",
                self.auth.kind()
            ),
            // rustls' verdicts arrive as Tls or Io errors, depending on the
            // stage of the handshake.
            ConnectErrorKind::Tls | ConnectErrorKind::Io if is_tls_failure(&detail) => {
                let hint = if detail.contains("UnknownIssuer")
                    || detail.contains("invalid peer certificate")
                {
                    match &self.tls.ca {
                        Some(ca) => format!(
                            "; the server's certificate is not signed by the CA in {}{}",
                            ca.display(),
                            origin(&["ca"])
                        ),
                        None => "; the server's certificate is not trusted by the system roots: \
                                 give the CA that signed it with --tlsca (or NATS_CA, or the context's \"ca\")"
                            .to_string(),
                    }
                } else if detail.contains("CertificateRequired")
                    || detail.contains("certificate required")
                {
                    "; the server wants a client certificate: --tlscert and --tlskey".to_string()
                } else {
                    String::new()
                };
                anyhow!("cannot connect to {urls}: TLS failed: {detail}{hint}")
            }
            _ => anyhow!("cannot connect to {urls}: {detail}"),
        }
    }
}

/// Keeps a refusal once, up to [`MAX_REFUSALS`] of them.
fn keep_refusal(refusals: &Mutex<Vec<String>>, text: &str) {
    let mut kept = refusals.lock().expect("not poisoned");
    if kept.len() < MAX_REFUSALS && !kept.iter().any(|k| k == text) {
        kept.push(text.to_string());
    }
}

fn is_tls_failure(detail: &str) -> bool {
    ["TLS", "tls", "certificate", "handshake", "Certificate"]
        .iter()
        .any(|w| detail.contains(w))
}

/// The error and its sources in one line: async-nats keeps the useful part
/// (rustls' reason) in the source chain.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Credentials embedded in the first URL of a list that has any.
fn settings_credentials(urls: &str) -> Option<Auth> {
    urls.split(',')
        .find_map(|u| url::split_credentials(u.trim()).1)
        .map(|c| match c {
            url::UrlCredentials::User(user, password) => Auth::UserPassword { user, password },
            url::UrlCredentials::Token(token) => Auth::Token(token),
        })
}

/// Retry a lost connection every 50 ms, backing off to 500 ms. async-nats'
/// default doubles up to 4 s, so after a one-second server restart a client
/// could wait two more seconds: the outage jsbench measures must be the
/// server's, not the client's back-off.
fn reconnect_delay(attempts: usize) -> Duration {
    Duration::from_millis(50 * attempts.clamp(1, 10) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avoiding_a_server_keeps_the_others_and_the_shared_records() {
        let s = ConnectSettings::new(
            "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224",
            Duration::from_secs(1),
        )
        .unwrap();
        let off = s.avoiding("nats://127.0.0.1:4223").unwrap();
        assert_eq!(
            off.display_urls(),
            "nats://127.0.0.1:4222,nats://127.0.0.1:4224"
        );
        assert!(off.listed_only && !s.listed_only);
        off.note_refusal("denied");
        assert_eq!(s.take_refusals(), vec!["denied".to_string()]);
        let err = s.avoiding("nats://127.0.0.1:5000").unwrap_err();
        assert!(err.to_string().contains("none of the servers"), "{err}");
        let one = ConnectSettings::new("nats://127.0.0.1:4222", Duration::from_secs(1)).unwrap();
        let err = one.avoiding("nats://127.0.0.1:4222").unwrap_err();
        assert!(err.to_string().contains("leaves no server"), "{err}");
    }

    #[test]
    fn credentials_in_urls_become_options_and_never_display() {
        let s = ConnectSettings::new("nats://alice:s3cret@127.0.0.1:4222", Duration::from_secs(1))
            .unwrap();
        assert_eq!(
            s.auth,
            Auth::UserPassword {
                user: "alice".into(),
                password: Secret::new("s3cret")
            }
        );
        assert!(!s.display_urls().contains("s3cret"), "{}", s.display_urls());
        assert!(!format!("{s:?}").contains("s3cret"), "Debug leaks: {s:?}");
        assert!(!s.describe().contains("s3cret"));

        let s = ConnectSettings::new("nats://tok@127.0.0.1:4222", Duration::from_secs(1)).unwrap();
        assert_eq!(s.auth, Auth::Token(Secret::new("tok")));
    }

    #[test]
    fn bad_url_is_a_usage_error() {
        let err = ConnectSettings::new("nats://bad host:x", Duration::from_secs(1)).unwrap_err();
        assert!(
            err.downcast_ref::<crate::system::error::UsageError>()
                .is_some(),
            "{err:#}"
        );
    }

    #[test]
    fn tls_urls_require_tls_and_domains_pick_the_api_prefix() {
        let s = ConnectSettings::new("tls://127.0.0.1:4222", Duration::from_secs(1)).unwrap();
        assert!(s.tls.required);
        assert_eq!(JsApi::Default.prefix(), "$JS.API");
        assert_eq!(JsApi::Domain("hub".into()).prefix(), "$JS.hub.API");
    }
}
