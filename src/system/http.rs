//! A minimal HTTP/1.0 GET for nats-server's monitoring endpoints (/varz,
//! /jsz): plain HTTP on a known host and port, which does not justify an
//! HTTP client dependency.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

/// The JSON `path` of the monitoring endpoint `url` answers; `None` when
/// it does not answer, or not with that JSON.
pub fn get_json<T: serde::de::DeserializeOwned>(url: &str, path: &str) -> Option<T> {
    get_parsed(url, path).ok()
}

/// The JSON `path` of the monitoring endpoint `url` answers; the error
/// says whether it did not answer or not with that JSON.
pub fn get_parsed<T: serde::de::DeserializeOwned>(url: &str, path: &str) -> Result<T> {
    let body = get(&format!("{}{path}", url.trim_end_matches('/')))?;
    serde_json::from_str(&body).with_context(|| format!("parsing {path}"))
}

/// GETs a monitoring URL (`http://127.0.0.1:<port>/jsz`) and returns the
/// body; any status but 200 is an error naming it.
pub fn get(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not an http:// URL: {url}"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut stream = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .with_context(|| format!("reading {url}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response from {url}"))?;
    let status = head.lines().next().unwrap_or("");
    if !status.contains(" 200 ") {
        bail!("{url} answered {status:?}");
    }
    Ok(body.to_string())
}
