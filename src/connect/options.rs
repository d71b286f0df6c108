//! Where a connection's settings come from, and which source wins.
//!
//! jsbench takes natscli's flags and environment variables, natscli context
//! files, and a profile's `[connection]` table. Each setting is taken from
//! the first source that has it:
//!
//! 1. a command-line flag (`--user`),
//! 2. its environment variable (`NATS_USER`), which natscli treats as the
//!    flag's default,
//! 3. the profile's `[connection]` table,
//! 4. the context (named by `--context`, else `NATS_CONTEXT`, else the
//!    profile's `connection.context`).
//!
//! Without a server from any of them jsbench starts its own. A context is
//! only used when one is named: benchmarking whatever natscli has selected
//! just because it is selected would point load at a shared cluster
//! by surprise. `--context` without a name asks for that selection.
//!
//! One authentication method is used, chosen as natscli chooses: user and
//! password, else creds, else nkey, else token. A source that gives two
//! methods at once is an error; a method hidden by a higher source is named
//! in a note, so it is never a mystery which credentials went to which
//! server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::context::{self, Context, Layer};
use super::environment::Environment;
use super::{Auth, ConnectSettings, JsApi, Secret, TlsSettings};
use crate::profile::connection::domain_problem;
use crate::profile::{ConnectionPlan, parse_duration};
use crate::system::error::UsageError;
use crate::system::url::{self, UrlCredentials};

/// Default bound on each connection attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// natscli's connection flags. Each names its environment variable in the
/// help text; the variables are read by [`Environment`], not by clap, so a
/// setting's origin is known and can be reported.
#[derive(clap::Args, Clone, Default)]
pub struct ConnectionFlags {
    /// NATS server URL(s), comma-separated, instead of the embedded server [env: NATS_URL]
    #[arg(short = 's', long, value_name = "URL", help_heading = "Connection")]
    pub server: Option<String>,

    /// natscli context: a name in ~/.config/nats/context/, a FILE.json, or
    /// nothing for the context natscli has selected [env: NATS_CONTEXT]
    #[arg(
        long,
        value_name = "NAME|FILE",
        num_args = 0..=1,
        default_missing_value = "",
        help_heading = "Connection"
    )]
    pub context: Option<String>,

    /// User name [env: NATS_USER]
    #[arg(long, value_name = "USER", help_heading = "Connection")]
    pub user: Option<String>,

    /// Password; prefer NATS_PASSWORD or a context, which other users of the machine cannot see [env: NATS_PASSWORD]
    #[arg(long, value_name = "PASSWORD", help_heading = "Connection")]
    pub password: Option<String>,

    /// Authentication token [env: NATS_TOKEN]
    #[arg(long, value_name = "TOKEN", help_heading = "Connection")]
    pub token: Option<String>,

    /// User credentials file (JWT and seed) [env: NATS_CREDS]
    #[arg(long, value_name = "FILE", help_heading = "Connection")]
    pub creds: Option<PathBuf>,

    /// File holding a user NKey seed [env: NATS_NKEY]
    #[arg(long, value_name = "FILE", help_heading = "Connection")]
    pub nkey: Option<PathBuf>,

    /// TLS client certificate (PEM) [env: NATS_CERT]
    #[arg(long, value_name = "FILE", help_heading = "Connection")]
    pub tlscert: Option<PathBuf>,

    /// TLS client key (PEM) [env: NATS_KEY]
    #[arg(long, value_name = "FILE", help_heading = "Connection")]
    pub tlskey: Option<PathBuf>,

    /// CA certificate(s) to trust instead of the system roots (PEM) [env: NATS_CA]
    #[arg(long, value_name = "FILE", help_heading = "Connection")]
    pub tlsca: Option<PathBuf>,

    /// Start TLS before the server's greeting (servers with handshake_first)
    #[arg(long, help_heading = "Connection")]
    pub tlsfirst: bool,

    /// Bound on each connection attempt, e.g. 5s [default: 5s] [env: NATS_TIMEOUT]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Connection")]
    pub timeout: Option<Duration>,

    /// Connection-name prefix the server shows (in /connz) [default: jsbench]
    #[arg(long, value_name = "NAME", help_heading = "Connection")]
    pub connection_name: Option<String>,

    /// JetStream domain
    #[arg(long, value_name = "DOMAIN", help_heading = "Connection")]
    pub js_domain: Option<String>,
}

impl std::fmt::Debug for ConnectionFlags {
    /// Like the derived one, with the password and token masked: the flags
    /// travel inside the parsed command line, which may be debug-printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mask = |v: &Option<String>| v.as_ref().map(|_| "***");
        f.debug_struct("ConnectionFlags")
            .field("server", &self.server.as_deref().map(url::redact))
            .field("context", &self.context)
            .field("user", &self.user)
            .field("password", &mask(&self.password))
            .field("token", &mask(&self.token))
            .field("creds", &self.creds)
            .field("nkey", &self.nkey)
            .field("tlscert", &self.tlscert)
            .field("tlskey", &self.tlskey)
            .field("tlsca", &self.tlsca)
            .field("tlsfirst", &self.tlsfirst)
            .field("timeout", &self.timeout)
            .field("connection_name", &self.connection_name)
            .field("js_domain", &self.js_domain)
            .finish()
    }
}

/// Everything the user said about the connection outside profiles.
#[derive(Debug, Clone, Default)]
pub struct ConnectionRequest {
    pub flags: ConnectionFlags,
    pub env: Environment,
}

impl ConnectionRequest {
    /// The flags given, with this process's environment.
    pub fn from_process(flags: ConnectionFlags) -> Self {
        ConnectionRequest {
            flags,
            env: Environment::from_process(),
        }
    }
}

/// What to connect to.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// `None`: no server was named, start the embedded one.
    pub remote: Option<ConnectSettings>,
    /// Applies to the embedded server too.
    pub timeout: Duration,
    pub name: String,
    /// Things the user should know (settings skipped or hidden).
    pub notes: Vec<String>,
}

impl Resolution {
    /// The settings to use: the named server, or the local URLs jsbench
    /// started.
    pub fn settings(&self, local_urls: &str) -> anyhow::Result<ConnectSettings> {
        match &self.remote {
            Some(s) => Ok(s.clone()),
            None => {
                let mut s = ConnectSettings::new(local_urls, self.timeout)?;
                s.name = self.name.clone();
                Ok(s)
            }
        }
    }
}

/// The sources, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Flag,
    Env,
    Profile,
    Context,
}

/// Names a setting's origin the way the user wrote it.
struct Origins {
    profile: String,
    context: String,
}

impl Origins {
    /// The profile's and the context's names, as origins mention them.
    fn new(profile_name: &str, context: Option<&Context>) -> Self {
        Origins {
            profile: format!("profile {profile_name}"),
            context: match context {
                Some(c) => format!("context {}", c.name),
                None => "context".into(),
            },
        }
    }

    fn of(&self, source: Source, field: &str) -> String {
        let (flag, env) = match field {
            "url" => ("--server", "NATS_URL"),
            "user" => ("--user", "NATS_USER"),
            "password" => ("--password", "NATS_PASSWORD"),
            "token" => ("--token", "NATS_TOKEN"),
            "creds" => ("--creds", "NATS_CREDS"),
            "nkey" => ("--nkey", "NATS_NKEY"),
            "cert" => ("--tlscert", "NATS_CERT"),
            "key" => ("--tlskey", "NATS_KEY"),
            "ca" => ("--tlsca", "NATS_CA"),
            "tls_first" => ("--tlsfirst", "-"),
            "timeout" => ("--timeout", "NATS_TIMEOUT"),
            "connection_name" => ("--connection-name", "-"),
            "jetstream_domain" => ("--js-domain", "-"),
            _ => ("-", "-"),
        };
        match source {
            Source::Flag => flag.to_string(),
            Source::Env => env.to_string(),
            Source::Profile => format!("{} connection.{field}", self.profile),
            Source::Context => self.context.clone(),
        }
    }
}

fn flags_layer(f: &ConnectionFlags) -> Layer {
    let text = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
    Layer {
        url: text(&f.server),
        user: text(&f.user),
        password: text(&f.password).map(Secret::new),
        token: text(&f.token).map(Secret::new),
        creds: f.creds.clone(),
        nkey: f.nkey.clone(),
        cert: f.tlscert.clone(),
        key: f.tlskey.clone(),
        ca: f.tlsca.clone(),
        tls_first: f.tlsfirst.then_some(true),
        timeout: f.timeout,
        name: text(&f.connection_name),
        js_domain: text(&f.js_domain),
        js_api_prefix: None,
        inbox_prefix: None,
    }
}

fn env_layer(env: &Environment) -> Result<Layer, UsageError> {
    let path = |k: &str| env.get(k).map(|p| context::expand_path(p, env));
    let timeout = (env.get("NATS_TIMEOUT"))
        .map(|text| {
            parse_duration(text)
                .map_err(|e| UsageError(format!("NATS_TIMEOUT={text:?} is invalid: {e}")))
        })
        .transpose()?;
    Ok(Layer {
        url: env.get("NATS_URL").map(str::to_string),
        user: env.get("NATS_USER").map(str::to_string),
        password: env.get("NATS_PASSWORD").map(Secret::new),
        token: env.get("NATS_TOKEN").map(Secret::new),
        creds: path("NATS_CREDS"),
        nkey: path("NATS_NKEY"),
        cert: path("NATS_CERT"),
        key: path("NATS_KEY"),
        ca: path("NATS_CA"),
        timeout,
        ..Default::default()
    })
}

fn profile_layer(p: &ConnectionPlan, env: &Environment) -> Layer {
    let path = |v: &Option<String>| v.as_deref().map(|p| context::expand_path(p, env));
    Layer {
        url: p.url.clone(),
        user: p.user.clone(),
        creds: path(&p.creds),
        nkey: path(&p.nkey),
        cert: path(&p.cert),
        key: path(&p.key),
        ca: path(&p.ca),
        tls_first: p.tls_first,
        timeout: p.timeout,
        name: p.connection_name.clone(),
        js_domain: p.jetstream_domain.clone(),
        ..Default::default()
    }
}

fn context_layer(c: &Context) -> Layer {
    Layer {
        // natscli's default when a context names no server.
        url: (c.settings.url.clone()).or_else(|| Some("nats://127.0.0.1:4222".into())),
        ..c.settings.clone()
    }
}

/// Resolves the connection for one profile. `local_cluster`: the user asked
/// for `--cluster`, which starts local servers and so cannot be combined
/// with a named server.
pub fn resolve(
    request: &ConnectionRequest,
    profile_name: &str,
    profile: Option<&ConnectionPlan>,
    local_cluster: bool,
) -> Result<Resolution, UsageError> {
    let env = &request.env;
    let mut notes = Vec::new();
    let flags = flags_layer(&request.flags);
    let mut env_layer = env_layer(env)?;
    let profile_layer = profile.map(|p| profile_layer(p, env)).unwrap_or_default();
    let mut context_spec = context_spec(request, profile);

    if local_cluster {
        refuse_named_server(request, profile, &flags, &profile_layer)?;
        notes.extend(ignored_for_cluster(&env_layer, env));
        env_layer.url = None;
        context_spec = None;
    }

    let context = (context_spec.as_deref())
        .map(|spec| load_context(spec, env, &mut notes))
        .transpose()?;
    let origins = Origins::new(profile_name, context.as_ref());
    let context_layer = context.as_ref().map(context_layer).unwrap_or_default();
    let mut layers = [
        (Source::Flag, flags),
        (Source::Env, env_layer),
        (Source::Profile, profile_layer),
        (Source::Context, context_layer),
    ];

    let timeout_pick = pick(&layers, |l| l.timeout);
    let name_pick = pick(&layers, |l| l.name.clone());
    // No remote (the embedded server) unless a source names a server.
    let mut resolution = Resolution {
        remote: None,
        timeout: timeout_pick.map_or(DEFAULT_TIMEOUT, |(t, _)| t),
        name: (name_pick.clone()).map_or_else(|| "jsbench".into(), |(n, _)| n),
        notes,
    };
    let Some((urls, url_source)) = pick(&layers, |l| l.url.clone()) else {
        refuse_unused_settings(&layers, &origins)?;
        return Ok(resolution);
    };

    let parsed = url::parse_list(&urls, &origins.of(url_source, "url"))?;
    adopt_url_credentials(&mut layers, url_source, &parsed);

    let mut sources = BTreeMap::new();
    sources.insert("url".to_string(), origins.of(url_source, "url"));
    let auth = resolve_auth(&layers, &origins, &mut sources, &mut resolution.notes)?;
    let tls = resolve_tls(&layers, &origins, &mut sources, &parsed)?;
    let js_api = resolve_js_api(&layers, &origins, &mut sources)?;
    // Picked above, as the embedded server uses them too.
    let picked = [
        ("timeout", timeout_pick.map(|(_, s)| s)),
        ("connection_name", name_pick.map(|(_, s)| s)),
    ];
    for (field, source) in picked {
        if let Some(s) = source {
            sources.insert(field.into(), origins.of(s, field));
        }
    }

    let mut settings = ConnectSettings::from_parsed(parsed, resolution.timeout);
    settings.auth = auth;
    settings.tls = tls;
    settings.name = resolution.name.clone();
    settings.js_api = js_api;
    settings.inbox_prefix = pick(&layers, |l| l.inbox_prefix.clone()).map(|(p, _)| p);
    settings.context = context.as_ref().map(|c| c.name.clone());
    settings.sources = sources;
    resolution.remote = Some(settings);
    Ok(resolution)
}

/// Which context is named, if any: `--context`, else `NATS_CONTEXT`, else
/// the profile's `connection.context`.
fn context_spec(request: &ConnectionRequest, profile: Option<&ConnectionPlan>) -> Option<String> {
    (request.flags.context.clone())
        .or_else(|| request.env.get("NATS_CONTEXT").map(str::to_string))
        .or_else(|| profile.and_then(|p| p.context.clone()))
}

/// `--cluster` starts local servers: a server named on purpose, by a flag
/// or the profile, contradicts it and is an error.
fn refuse_named_server(
    request: &ConnectionRequest,
    profile: Option<&ConnectionPlan>,
    flags: &Layer,
    profile_layer: &Layer,
) -> Result<(), UsageError> {
    let named = [
        (flags.url.is_some(), "--server"),
        (request.flags.context.is_some(), "--context"),
        (profile_layer.url.is_some(), "the profile's connection.url"),
        (
            profile.is_some_and(|p| p.context.is_some()),
            "the profile's connection.context",
        ),
    ];
    if let Some((_, what)) = named.iter().find(|(set, _)| *set) {
        return Err(UsageError(format!(
            "--cluster starts a local cluster; it cannot be combined with {what}, which names \
             another server"
        )));
    }
    Ok(())
}

/// With `--cluster`, a server named by the environment is ambient rather
/// than asked for: it is set aside with a note instead of an error.
fn ignored_for_cluster(env_layer: &Layer, env: &Environment) -> Vec<String> {
    [
        ("NATS_URL", env_layer.url.is_some()),
        ("NATS_CONTEXT", env.get("NATS_CONTEXT").is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(var, _)| format!("--cluster starts local servers; ignoring {var}"))
    .collect()
}

/// Loads the named context; fields jsbench does not know are named in a
/// note rather than dropped silently.
fn load_context(
    spec: &str,
    env: &Environment,
    notes: &mut Vec<String>,
) -> Result<Context, UsageError> {
    let c = context::load(spec, env)?;
    if !c.ignored.is_empty() {
        notes.push(format!(
            "context {} ({}): ignoring fields jsbench does not know: {}",
            c.name,
            c.path.display(),
            c.ignored.join(", ")
        ));
    }
    Ok(c)
}

/// No server named anywhere: the embedded server, which needs no
/// credentials. Credentials typed for this run would be silently unused, so
/// they are an error; ambient ones are simply not used.
fn refuse_unused_settings(layers: &[(Source, Layer)], origins: &Origins) -> Result<(), UsageError> {
    let explicit: Vec<String> = (layers.iter())
        .filter(|(s, _)| matches!(s, Source::Flag | Source::Profile))
        .flat_map(|(s, l)| set_fields(l).into_iter().map(|f| origins.of(*s, f)))
        .collect();
    if !explicit.is_empty() {
        return Err(UsageError(format!(
            "{} given, but no server to use it with: jsbench starts its own server unless \
             -s/--server, --context or the profile's connection.url names one",
            explicit.join(", ")
        )));
    }
    Ok(())
}

/// Credentials inside the URL count as the URL's source giving them,
/// below any user or token that source gives explicitly.
fn adopt_url_credentials(
    layers: &mut [(Source, Layer)],
    url_source: Source,
    parsed: &[url::ParsedUrl],
) {
    if let Some(credentials) = parsed.iter().find_map(|u| u.credentials.clone()) {
        let layer = &mut layers
            .iter_mut()
            .find(|(s, _)| *s == url_source)
            .expect("layer")
            .1;
        if layer.user.is_none() && layer.token.is_none() {
            match credentials {
                UrlCredentials::User(user, password) => {
                    layer.user = Some(user);
                    layer.password = Some(password);
                }
                UrlCredentials::Token(token) => layer.token = Some(token),
            }
        }
    }
}

/// Where JetStream's API lives: a domain, from any source, wins over an API
/// prefix (which only a context gives), else the default.
fn resolve_js_api(
    layers: &[(Source, Layer)],
    origins: &Origins,
    sources: &mut BTreeMap<String, String>,
) -> Result<JsApi, UsageError> {
    let domain = pick(layers, |l| l.js_domain.clone());
    let prefix = pick(layers, |l| l.js_api_prefix.clone());
    let js_api = match (domain, prefix) {
        (Some((d, s)), _) => {
            check_domain(&d, &origins.of(s, "jetstream_domain"))?;
            sources.insert("jetstream_domain".into(), origins.of(s, "jetstream_domain"));
            JsApi::Domain(d)
        }
        (None, Some((p, s))) => {
            sources.insert(
                "jetstream_api_prefix".into(),
                origins.of(s, "jetstream_api_prefix"),
            );
            JsApi::Prefix(p)
        }
        (None, None) => JsApi::Default,
    };
    Ok(js_api)
}

/// Resolves the connection of every profile of one run. They share one
/// server (jsbench connects once), so profiles that name different
/// connections must run separately.
pub fn resolve_all<'a>(
    request: &ConnectionRequest,
    profiles: impl IntoIterator<Item = (&'a str, Option<&'a ConnectionPlan>)>,
    local_cluster: bool,
) -> Result<Resolution, UsageError> {
    let mut first: Option<(&str, Resolution)> = None;
    for (name, plan) in profiles {
        let resolution = resolve(request, name, plan, local_cluster)?;
        match &first {
            None => first = Some((name, resolution)),
            Some((first_name, r)) => {
                if r.remote != resolution.remote {
                    return Err(UsageError(format!(
                        "profiles {first_name} and {name} connect to different servers or as \
                         different users; run them separately"
                    )));
                }
            }
        }
    }
    Ok(first.map(|(_, r)| r).unwrap_or_else(|| Resolution {
        remote: None,
        timeout: DEFAULT_TIMEOUT,
        name: "jsbench".into(),
        notes: Vec::new(),
    }))
}

/// The first source's value, with the source.
fn pick<T>(layers: &[(Source, Layer)], get: impl Fn(&Layer) -> Option<T>) -> Option<(T, Source)> {
    layers.iter().find_map(|(s, l)| get(l).map(|v| (v, *s)))
}

/// Settings a layer gives that only make sense with a named server.
fn set_fields(l: &Layer) -> Vec<&'static str> {
    [
        (l.user.is_some(), "user"),
        (l.password.is_some(), "password"),
        (l.token.is_some(), "token"),
        (l.creds.is_some(), "creds"),
        (l.nkey.is_some(), "nkey"),
        (l.cert.is_some(), "cert"),
        (l.key.is_some(), "key"),
        (l.ca.is_some(), "ca"),
        (l.tls_first.is_some(), "tls_first"),
        (l.js_domain.is_some(), "jetstream_domain"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect()
}

/// The methods a layer gives, in natscli's order of preference.
fn methods(l: &Layer) -> Vec<&'static str> {
    [
        (l.user.is_some() || l.password.is_some(), "user"),
        (l.creds.is_some(), "creds"),
        (l.nkey.is_some(), "nkey"),
        (l.token.is_some(), "token"),
    ]
    .into_iter()
    .filter_map(|(set, method)| set.then_some(method))
    .collect()
}

fn resolve_auth(
    layers: &[(Source, Layer)],
    origins: &Origins,
    sources: &mut BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<Auth, UsageError> {
    for (source, layer) in layers {
        let found = methods(layer);
        if found.len() > 1 {
            let names: Vec<String> = found.iter().map(|m| origins.of(*source, m)).collect();
            return Err(UsageError(format!(
                "{} are alternative ways to authenticate; give one",
                names.join(" and ")
            )));
        }
    }
    // The highest source that gives a method decides it; a password alone
    // completes a user from a lower source (a context's user, NATS_PASSWORD).
    let decides =
        |l: &Layer| l.user.is_some() || l.creds.is_some() || l.nkey.is_some() || l.token.is_some();
    let chosen = layers.iter().find(|(_, l)| decides(l));
    let Some((source, layer)) = chosen else {
        if let Some((_, s)) = pick(layers, |l| l.password.clone()) {
            return Err(UsageError(format!(
                "{} given without a user name (--user, NATS_USER or the context's \"user\")",
                origins.of(s, "password")
            )));
        }
        return Ok(Auth::None);
    };
    let method = methods(layer)[0];
    for (lower, l) in layers.iter().filter(|(s, _)| s > source) {
        for m in methods(l) {
            if m != method {
                notes.push(format!(
                    "authenticating with {} from {}; ignoring {} from {}",
                    method_name(method),
                    origins.of(*source, method),
                    method_name(m),
                    origins.of(*lower, m)
                ));
            }
        }
    }
    let auth = match method {
        "user" => {
            let user = layer.user.clone().expect("user method has a user");
            sources.insert("user".into(), origins.of(*source, "user"));
            let password = match pick(layers, |l| l.password.clone()) {
                Some((p, s)) => {
                    sources.insert("password".into(), origins.of(s, "password"));
                    p
                }
                None => Secret::new(""),
            };
            Auth::UserPassword { user, password }
        }
        "creds" => {
            let path = layer.creds.clone().expect("creds");
            let origin = origins.of(*source, "creds");
            let contents = read_secret_file(&path, &origin)?;
            async_nats::ConnectOptions::new()
                .credentials(&contents)
                .map_err(|e| {
                    UsageError(format!(
                        "{origin} {}: not a NATS credentials file ({e})",
                        path.display()
                    ))
                })?;
            sources.insert("creds".into(), origin);
            Auth::Creds {
                path,
                contents: Secret::new(contents),
            }
        }
        "nkey" => {
            let path = layer.nkey.clone().expect("nkey");
            let origin = origins.of(*source, "nkey");
            let text = read_secret_file(&path, &origin)?;
            let seed = text
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("SU"))
                .filter(|s| nkeys::KeyPair::from_seed(s).is_ok())
                .ok_or_else(|| {
                    UsageError(format!(
                        "{origin} {}: no user NKey seed (a line starting with SU) in the file",
                        path.display()
                    ))
                })?;
            sources.insert("nkey".into(), origin);
            Auth::Nkey {
                path,
                seed: Secret::new(seed),
            }
        }
        _ => {
            sources.insert("token".into(), origins.of(*source, "token"));
            Auth::Token(layer.token.clone().expect("token"))
        }
    };
    Ok(auth)
}

fn method_name(m: &str) -> &'static str {
    match m {
        "user" => "user/password",
        "creds" => "creds",
        "nkey" => "nkey",
        _ => "token",
    }
}

fn resolve_tls(
    layers: &[(Source, Layer)],
    origins: &Origins,
    sources: &mut BTreeMap<String, String>,
    urls: &[url::ParsedUrl],
) -> Result<TlsSettings, UsageError> {
    let mut tls = TlsSettings {
        required: urls.iter().any(url::wants_tls),
        ..Default::default()
    };
    if let Some((ca, s)) = pick(layers, |l| l.ca.clone()) {
        let origin = origins.of(s, "ca");
        check_pem(&ca, &origin, "CERTIFICATE")?;
        sources.insert("ca".into(), origin);
        tls.ca = Some(ca);
    }
    let cert = pick(layers, |l| l.cert.clone());
    let key = pick(layers, |l| l.key.clone());
    match (cert, key) {
        (Some((cert, cs)), Some((key, ks))) => {
            let (co, ko) = (origins.of(cs, "cert"), origins.of(ks, "key"));
            check_pem(&cert, &co, "CERTIFICATE")?;
            check_pem(&key, &ko, "PRIVATE KEY")?;
            sources.insert("cert".into(), co);
            sources.insert("key".into(), ko);
            tls.client = Some((cert, key));
        }
        (Some((_, s)), None) => {
            return Err(UsageError(format!(
                "{} given without a key: add --tlskey (or NATS_KEY)",
                origins.of(s, "cert")
            )));
        }
        (None, Some((_, s))) => {
            return Err(UsageError(format!(
                "{} given without a certificate: add --tlscert (or NATS_CERT)",
                origins.of(s, "key")
            )));
        }
        (None, None) => {}
    }
    if let Some((first, s)) = pick(layers, |l| l.tls_first) {
        tls.first = first;
        if first {
            sources.insert("tls_first".into(), origins.of(s, "tls_first"));
        }
    }
    // Like natscli: asking for any TLS setting means TLS or nothing.
    tls.required |= tls.first || tls.ca.is_some() || tls.client.is_some();
    Ok(tls)
}

/// Reads a file that holds a secret (a key, a seed, a PEM block); the
/// error names the file, never its contents.
fn read_secret_file(path: &Path, origin: &str) -> Result<String, UsageError> {
    std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{origin} {}: cannot read: {e}", path.display())))
}

/// A PEM file must be readable and hold the block it is meant to hold; a
/// swapped certificate and key would otherwise fail deep in the handshake.
fn check_pem(path: &Path, origin: &str, block: &str) -> Result<(), UsageError> {
    let found = read_secret_file(path, origin)?
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.contains(block));
    if !found {
        return Err(UsageError(format!(
            "{origin} {}: no PEM \"{block}\" block in the file",
            path.display()
        )));
    }
    Ok(())
}

fn check_domain(domain: &str, origin: &str) -> Result<(), UsageError> {
    match domain_problem(domain) {
        Some(why) => Err(UsageError(format!("{origin} {why}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
