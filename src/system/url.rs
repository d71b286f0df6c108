//! Server URLs as NATS users write them: several per option, with
//! credentials sometimes embedded. async-nats ignores credentials inside a
//! URL and cannot parse a comma-separated list, so both are handled here, and
//! every URL that is shown or stored goes through [`redact`] first.

use async_nats::ServerAddr;

use crate::system::error::UsageError;
use crate::system::secret::Secret;

/// One server URL, split into what async-nats connects to and what may be
/// shown.
#[derive(Debug, Clone)]
pub struct ParsedUrl {
    pub addr: ServerAddr,
    /// The URL without credentials.
    pub display: String,
    pub credentials: Option<UrlCredentials>,
}

/// Credentials found inside a URL (`user:pass@` or `token@`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlCredentials {
    User(String, Secret),
    Token(Secret),
}

/// Parses a comma-separated list of URLs (`NATS_URL` style); `origin` names
/// where the list came from (`--server`, `NATS_URL`, `context staging`) so a
/// bad entry can be found.
pub fn parse_list(text: &str, origin: &str) -> Result<Vec<ParsedUrl>, UsageError> {
    let mut urls = Vec::new();
    for raw in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (clean, credentials) = split_credentials(raw);
        let addr: ServerAddr = clean.parse().map_err(|e| {
            UsageError(format!(
                "invalid server URL {:?} (from {origin}): {e}",
                redact(raw)
            ))
        })?;
        urls.push(ParsedUrl {
            addr,
            display: clean,
            credentials,
        });
    }
    if urls.is_empty() {
        return Err(UsageError(format!("no server URL given in {origin}")));
    }
    Ok(urls)
}

/// Takes `user:pass@` or `token@` out of a URL. The credentials run to
/// the last `@`, not to the first `/`: a password in base64 holds `/`
/// (and may hold `?` or `#`), and cut at the first `/` it was neither
/// recognised nor redacted. NATS URLs have no path that could hold an `@`.
pub fn split_credentials(url: &str) -> (String, Option<UrlCredentials>) {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    match rest.rfind('@') {
        Some(at) => {
            let info = &rest[..at];
            let clean = format!("{scheme}{}", &rest[at + 1..]);
            let credentials = match info.split_once(':') {
                Some((u, p)) => UrlCredentials::User(u.to_string(), Secret::new(p)),
                None => UrlCredentials::Token(Secret::new(info)),
            };
            (clean, Some(credentials))
        }
        None => (url.to_string(), None),
    }
}

/// A URL (or comma-separated list) with credentials replaced by `***`, safe
/// to print and store.
pub fn redact(urls: &str) -> String {
    urls.split(',')
        .map(|url| match split_credentials(url.trim()) {
            (clean, Some(_)) => match clean.find("://") {
                Some(i) => format!("{}***@{}", &clean[..i + 3], &clean[i + 3..]),
                None => format!("***@{clean}"),
            },
            (clean, None) => clean,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a URL asks for TLS by its scheme.
pub fn wants_tls(url: &ParsedUrl) -> bool {
    matches!(url.addr.scheme(), "tls" | "wss")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_credentials_out_of_urls() {
        let urls = parse_list("nats://alice:s3cret@127.0.0.1:4222", "--server").unwrap();
        assert_eq!(
            urls[0].credentials,
            Some(UrlCredentials::User("alice".into(), Secret::new("s3cret")))
        );
        assert_eq!(urls[0].display, "nats://127.0.0.1:4222");

        let urls = parse_list("nats://tok@127.0.0.1:4222", "--server").unwrap();
        assert_eq!(
            urls[0].credentials,
            Some(UrlCredentials::Token(Secret::new("tok")))
        );
    }

    /// Issue 51: a password with `/` (base64's alphabet has it) was cut at
    /// the `/`, so it was neither taken out nor redacted, and printed.
    #[test]
    fn a_password_with_slashes_or_marks_is_taken_out_and_never_shown() {
        for (url, password) in [
            ("nats://alice:pa/ss99@127.0.0.1:1", "pa/ss99"),
            ("nats://alice:a?b#c/d@127.0.0.1:1", "a?b#c/d"),
        ] {
            let urls = parse_list(url, "--server").unwrap();
            assert_eq!(
                urls[0].credentials,
                Some(UrlCredentials::User("alice".into(), Secret::new(password)))
            );
            assert_eq!(urls[0].display, "nats://127.0.0.1:1");
            let shown = redact(url);
            assert_eq!(shown, "nats://***@127.0.0.1:1");
            assert!(!shown.contains(password));
        }
        let urls = parse_list("tls://to/ken@127.0.0.1:1", "--server").unwrap();
        assert_eq!(
            urls[0].credentials,
            Some(UrlCredentials::Token(Secret::new("to/ken")))
        );
    }

    #[test]
    fn comma_separated_urls_become_a_list() {
        let urls = parse_list("nats://127.0.0.1:4222, tls://127.0.0.1:4223,", "NATS_URL").unwrap();
        assert_eq!(urls.len(), 2);
        assert!(!wants_tls(&urls[0]));
        assert!(wants_tls(&urls[1]));
    }

    #[test]
    fn redacts_for_display() {
        assert_eq!(redact("nats://u:p@h:1"), "nats://***@h:1");
        assert_eq!(redact("nats://h:1"), "nats://h:1");
        assert_eq!(redact("t@h:1,nats://h:2"), "***@h:1,nats://h:2");
    }

    #[test]
    fn bad_url_names_its_origin_without_its_secret() {
        let err = parse_list("nats://u:hunter2@bad host:x", "NATS_URL").unwrap_err();
        assert!(err.0.contains("NATS_URL"), "{err}");
        assert!(!err.0.contains("hunter2"), "{err}");
        assert!(parse_list(" , ", "--server").is_err());
    }
}
