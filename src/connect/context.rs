//! natscli context files: `$XDG_CONFIG_HOME/nats/context/<name>.json`
//! (default `~/.config/nats/context/`), the selected one named in
//! `../context.txt`. jsbench's users already keep their clusters and
//! credentials there, so `--context staging` must mean what it means to
//! `nats`.
//!
//! natscli writes every field, empty ones as `""`, and adds fields over the
//! years: empty means unset, unknown fields are reported and skipped, and
//! fields that would change how the connection is made but that jsbench
//! cannot honour (a SOCKS proxy, an nsc lookup) are errors rather than
//! silently ignored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::Secret;
use super::environment::Environment;
use crate::system::error::UsageError;

/// One context file, read and checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// The name natscli knows it by: the file name without `.json`.
    pub name: String,
    pub path: PathBuf,
    /// What it sets, as one source of [`crate::connect::options`]; `tls_first`
    /// is `Some(true)` or unset.
    pub settings: Layer,
    /// Fields jsbench does not know, skipped; shown to the user as a note.
    pub ignored: Vec<String>,
}

/// One source's connection settings: a context, the flags, the
/// environment or a profile's `[connection]` table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layer {
    pub url: Option<String>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub token: Option<Secret>,
    pub creds: Option<PathBuf>,
    pub nkey: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub tls_first: Option<bool>,
    pub timeout: Option<Duration>,
    pub name: Option<String>,
    pub js_domain: Option<String>,
    pub js_api_prefix: Option<String>,
    pub inbox_prefix: Option<String>,
}

/// Fields that change how natscli connects but that jsbench cannot honour.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("socks_proxy", "connections through a SOCKS proxy"),
    ("nsc", "credential lookups through nsc"),
    ("user_jwt", "a user JWT outside a creds file (use creds)"),
    ("jetstream_event_prefix", "JetStream event prefixes"),
    ("windows_cert_store", "the Windows certificate store"),
    ("windows_cert_match_by", "the Windows certificate store"),
    ("windows_cert_match", "the Windows certificate store"),
    ("windows_ca_certs_match", "the Windows certificate store"),
];

/// Fields natscli uses for display only.
const COSMETIC: &[&str] = &["description", "color_scheme", "name"];

/// `$XDG_CONFIG_HOME`, else `$HOME/.config`: where natscli keeps `nats/`.
pub fn config_dir(env: &Environment) -> Result<PathBuf, UsageError> {
    if let Some(dir) = env.get("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(dir));
    }
    match env.get("HOME") {
        Some(home) => Ok(Path::new(home).join(".config")),
        None => Err(UsageError(
            "cannot find natscli contexts: neither XDG_CONFIG_HOME nor HOME is set".into(),
        )),
    }
}

/// The context natscli has selected (`nats context select`), if any.
pub fn selected(env: &Environment) -> Result<Option<String>, UsageError> {
    let file = config_dir(env)?.join("nats").join("context.txt");
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|s| !s.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(UsageError(format!("cannot read {}: {e}", file.display()))),
    }
}

/// Loads a context by name (`staging`), by path (`./staging.json`,
/// anything with a `/` or ending in `.json`), or, given an empty name, the
/// one selected in `context.txt`.
pub fn load(spec: &str, env: &Environment) -> Result<Context, UsageError> {
    let spec = spec.trim();
    let (name, path) = if spec.is_empty() {
        let Some(name) = selected(env)? else {
            let file = config_dir(env)?.join("nats").join("context.txt");
            return Err(UsageError(format!(
                "--context without a name uses natscli's selected context, but none is selected \
                 ({} is missing or empty); name one: --context NAME or --context FILE.json",
                file.display()
            )));
        };
        let path = named_path(&name, env)?;
        (name, path)
    } else if spec.contains('/') || spec.ends_with(".json") {
        let path = expand_path(spec, env);
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_string());
        (name, path)
    } else {
        (spec.to_string(), named_path(spec, env)?)
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && !spec.contains('/') {
            let known = known(env);
            UsageError(format!(
                "unknown context {name:?}: {} does not exist{}",
                path.display(),
                if known.is_empty() {
                    String::new()
                } else {
                    format!(" (known contexts: {})", known.join(", "))
                }
            ))
        } else {
            UsageError(format!("cannot read context file {}: {e}", path.display()))
        }
    })?;
    parse(&name, &path, &text, env)
}

fn named_path(name: &str, env: &Environment) -> Result<PathBuf, UsageError> {
    if name.contains("..") || name.contains('/') || name.contains('\\') {
        return Err(UsageError(format!(
            "invalid context name {name:?}: a name may not contain '/', '\\' or '..' \
             (give a path ending in .json to use a file)"
        )));
    }
    Ok(config_dir(env)?
        .join("nats")
        .join("context")
        .join(format!("{name}.json")))
}

/// Names of the contexts natscli knows, for "unknown context" messages.
fn known(env: &Environment) -> Vec<String> {
    let Ok(dir) = config_dir(env) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir.join("nats").join("context")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// Reads a context file's JSON. `name` and `path` appear in every message.
pub fn parse(
    name: &str,
    path: &Path,
    text: &str,
    env: &Environment,
) -> Result<Context, UsageError> {
    let at = format!("context {name} ({})", path.display());
    let value: Value = serde_json::from_str(text).map_err(|e| {
        UsageError(format!(
            "{at} is not valid JSON: {} at line {} column {}",
            classify(&e),
            e.line(),
            e.column()
        ))
    })?;
    let Value::Object(fields) = value else {
        return Err(UsageError(format!(
            "{at} must hold a JSON object of settings"
        )));
    };
    let mut context = Context {
        name: name.to_string(),
        path: path.to_path_buf(),
        ..Default::default()
    };
    for (key, value) in &fields {
        let key = key.as_str();
        if key == "tls_first" {
            context.settings.tls_first = match value {
                Value::Bool(b) => b.then_some(true),
                Value::Null => None,
                other => {
                    return Err(UsageError(format!(
                        "{at}: field \"tls_first\" must be true or false, found {}",
                        kind(other)
                    )));
                }
            };
            continue;
        }
        let text = match value {
            Value::String(s) => s.trim().to_string(),
            Value::Null => String::new(),
            _ if !is_known(key) => {
                if !COSMETIC.contains(&key) {
                    context.ignored.push(key.to_string());
                }
                continue;
            }
            // natscli writes `"windows_ca_certs_match": []` when unset.
            Value::Array(items) if items.is_empty() => String::new(),
            other => {
                // Never echo a value: it may be a secret in the wrong place.
                return Err(UsageError(format!(
                    "{at}: field {key:?} must be a string, found {}",
                    kind(other)
                )));
            }
        };
        if text.is_empty() {
            continue;
        }
        let path_field = |t: &str| Some(expand_path(t, env));
        let l = &mut context.settings;
        match key {
            "url" => l.url = Some(text),
            "user" => l.user = Some(text),
            "password" => l.password = Some(resolve_secret(&text, key, &at, env)?),
            "token" => l.token = Some(resolve_secret(&text, key, &at, env)?),
            "creds" => l.creds = path_field(&text),
            "nkey" => l.nkey = path_field(&text),
            "cert" => l.cert = path_field(&text),
            "key" => l.key = path_field(&text),
            "ca" => l.ca = path_field(&text),
            "jetstream_domain" => l.js_domain = Some(text),
            "jetstream_api_prefix" => l.js_api_prefix = Some(text),
            "inbox_prefix" => l.inbox_prefix = Some(text),
            _ if COSMETIC.contains(&key) => {}
            _ => {
                if let Some((_, what)) = UNSUPPORTED.iter().find(|(k, _)| *k == key) {
                    return Err(UsageError(format!(
                        "{at} sets {key:?}, but jsbench does not support {what}; \
                         use a context without it, or give the connection with flags"
                    )));
                }
                context.ignored.push(key.to_string());
            }
        }
    }
    let cert = context.settings.cert.is_some();
    if cert != context.settings.key.is_some() {
        return Err(UsageError(format!(
            "{at}: \"cert\" and \"key\" go together; it sets only {}",
            if cert { "cert" } else { "key" }
        )));
    }
    Ok(context)
}

fn is_known(key: &str) -> bool {
    matches!(
        key,
        "url"
            | "user"
            | "password"
            | "token"
            | "creds"
            | "nkey"
            | "cert"
            | "key"
            | "ca"
            | "jetstream_domain"
            | "jetstream_api_prefix"
            | "inbox_prefix"
    ) || UNSUPPORTED.iter().any(|(k, _)| *k == key)
}

/// `env://NAME` takes a secret from the environment, as natscli's resolvers
/// do, so a context file need not hold the secret itself.
fn resolve_secret(
    text: &str,
    field: &str,
    at: &str,
    env: &Environment,
) -> Result<Secret, UsageError> {
    if let Some(var) = text.strip_prefix("env://") {
        return match env.get(var) {
            Some(value) if !value.is_empty() => Ok(Secret::new(value)),
            _ => Err(UsageError(format!(
                "{at}: field {field:?} refers to environment variable {var}, which is not set"
            ))),
        };
    }
    for scheme in ["op://", "nsc://", "file://", "data:"] {
        if text.starts_with(scheme) {
            return Err(UsageError(format!(
                "{at}: field {field:?} uses a {scheme} reference, which jsbench does not resolve; \
                 use env://VARIABLE or the value itself"
            )));
        }
    }
    Ok(Secret::new(text))
}

/// Expands a leading `~` and `$VAR` / `${VAR}` references in a path, as
/// natscli does for the files a context names.
pub fn expand_path(text: &str, env: &Environment) -> PathBuf {
    let mut text = text.to_string();
    if (text == "~" || text.starts_with("~/"))
        && let Some(home) = env.get("HOME")
    {
        text = format!("{home}{}", &text[1..]);
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
        } else {
            out.push_str(env.get(name).unwrap_or(""));
            rest = &after[consumed..];
        }
    }
    out.push_str(rest);
    PathBuf::from(out)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// serde_json's message without the offending text, which may be a secret.
fn classify(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "unexpected data",
        serde_json::error::Category::Eof => "unexpected end of file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment::empty()
            .with("HOME", "/home/u")
            .with("CERTS", "/etc/certs")
            .with("STAGING_PASSWORD", "from-env")
    }

    fn parse_text(text: &str) -> Result<Context, UsageError> {
        parse("staging", Path::new("/c/staging.json"), text, &env())
    }

    #[test]
    fn reads_what_natscli_writes() {
        let c = parse_text(
            r#"{"description":"staging","url":"nats://a:4222,nats://b:4222","token":"","user":"bob",
                "password":"pw","creds":"","nkey":"","cert":"~/c.pem","key":"$CERTS/k.pem",
                "ca":"${CERTS}/ca.pem","nsc":"","jetstream_domain":"hub","jetstream_api_prefix":"",
                "jetstream_event_prefix":"","inbox_prefix":"_I","user_jwt":"","color_scheme":"",
                "tls_first":true,"socks_proxy":"","windows_ca_certs_match":[]}"#,
        )
        .unwrap();
        assert_eq!(
            c.settings.url.as_deref(),
            Some("nats://a:4222,nats://b:4222")
        );
        assert_eq!(c.settings.user.as_deref(), Some("bob"));
        assert_eq!(c.settings.password, Some(Secret::new("pw")));
        assert_eq!(c.settings.token, None);
        assert_eq!(c.settings.cert, Some(PathBuf::from("/home/u/c.pem")));
        assert_eq!(c.settings.key, Some(PathBuf::from("/etc/certs/k.pem")));
        assert_eq!(c.settings.ca, Some(PathBuf::from("/etc/certs/ca.pem")));
        assert_eq!(c.settings.tls_first, Some(true));
        assert_eq!(c.settings.js_domain.as_deref(), Some("hub"));
        assert_eq!(c.settings.inbox_prefix.as_deref(), Some("_I"));
        assert!(c.ignored.is_empty(), "{:?}", c.ignored);
    }

    #[test]
    fn env_references_resolve_secrets() {
        let c = parse_text(r#"{"user":"bob","password":"env://STAGING_PASSWORD"}"#).unwrap();
        assert_eq!(c.settings.password, Some(Secret::new("from-env")));
        let e = parse_text(r#"{"token":"env://MISSING"}"#).unwrap_err();
        assert!(e.0.contains("MISSING") && e.0.contains("\"token\""), "{e}");
        let e = parse_text(r#"{"token":"op://vault/item"}"#).unwrap_err();
        assert!(e.0.contains("op://"), "{e}");
    }

    #[test]
    fn unsupported_fields_are_errors_and_unknown_ones_notes() {
        let e = parse_text(r#"{"url":"nats://h","socks_proxy":"socks5://p:1080"}"#).unwrap_err();
        assert!(
            e.0.contains("socks_proxy") && e.0.contains("staging"),
            "{e}"
        );
        let c = parse_text(r#"{"url":"nats://h","future_field":{"x":1}}"#).unwrap();
        assert_eq!(c.ignored, vec!["future_field".to_string()]);
    }

    #[test]
    fn bad_values_name_the_field_but_never_echo_it() {
        let e = parse_text(r#"{"password": 12345}"#).unwrap_err();
        assert!(
            e.0.contains("\"password\"") && !e.0.contains("12345"),
            "{e}"
        );
        let e = parse_text(r#"{"tls_first": "yes"}"#).unwrap_err();
        assert!(e.0.contains("tls_first"), "{e}");
        let e = parse_text(r#"{"password": "hunter2""#).unwrap_err();
        assert!(
            e.0.contains("not valid JSON") && !e.0.contains("hunter2"),
            "{e}"
        );
        let e = parse_text(r#"{"cert": "/c.pem"}"#).unwrap_err();
        assert!(e.0.contains("\"key\""), "{e}");
        assert!(parse_text("[1]").is_err());
    }

    #[test]
    fn names_files_and_the_selected_context() {
        let dir = tempfile::tempdir().unwrap();
        let env = Environment::empty().with("XDG_CONFIG_HOME", dir.path().to_str().unwrap());
        let contexts = dir.path().join("nats").join("context");
        std::fs::create_dir_all(&contexts).unwrap();
        std::fs::write(
            contexts.join("dev.json"),
            r#"{"url":"nats://127.0.0.1:4333"}"#,
        )
        .unwrap();

        assert_eq!(
            load("dev", &env).unwrap().settings.url.as_deref(),
            Some("nats://127.0.0.1:4333")
        );
        let e = load("prod", &env).unwrap_err();
        assert!(
            e.0.contains("unknown context \"prod\"") && e.0.contains("dev"),
            "{e}"
        );
        assert!(load("../dev", &env).is_err());
        let e = load("", &env).unwrap_err();
        assert!(e.0.contains("context.txt"), "{e}");
        std::fs::write(dir.path().join("nats").join("context.txt"), "dev\n").unwrap();
        let c = load("", &env).unwrap();
        assert_eq!(c.name, "dev");
        let by_path = contexts.join("dev.json");
        let c = load(by_path.to_str().unwrap(), &env).unwrap();
        assert_eq!(c.name, "dev");
        assert_eq!(c.path, by_path);
    }
}
