//! The opening of a connection: the server's INFO, the client's CONNECT
//! with its credentials, and a PING whose PONG says the server accepted
//! them (or whose `-ERR` says why not).

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use super::{Connection, Frame};
use crate::connect::{Auth, ConnectSettings, NodeInfo};

/// The part of the server's INFO jsbench reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ServerInfo {
    pub server_name: String,
    pub version: String,
    pub cluster: Option<String>,
    pub max_payload: usize,
    pub headers: bool,
    pub nonce: Option<String>,
    pub tls_required: bool,
}

impl ServerInfo {
    pub fn node(&self) -> NodeInfo {
        NodeInfo {
            name: self.server_name.clone(),
            version: self.version.clone(),
            cluster: self.cluster.clone(),
            url: None,
        }
    }
}

/// CONNECT's options (the client protocol's names).
#[derive(Serialize, Default)]
struct ConnectOptions<'a> {
    verbose: bool,
    pedantic: bool,
    tls_required: bool,
    name: String,
    lang: &'static str,
    version: &'static str,
    protocol: u8,
    echo: bool,
    headers: bool,
    no_responders: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jwt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nkey: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sig: Option<String>,
}

pub(super) async fn open(
    stream: TcpStream,
    settings: &ConnectSettings,
    role: &str,
) -> Result<Connection> {
    let mut connection = Connection::new(stream, ServerInfo::default())?;
    let info = match connection.reader.next().await? {
        Frame::Info(json) => {
            serde_json::from_slice::<ServerInfo>(json).context("reading the server's INFO")?
        }
        other => bail!("the server did not open with INFO but with {other:?}"),
    };
    if info.tls_required {
        bail!("the server requires TLS; the direct connection speaks plain TCP only");
    }
    if !info.headers {
        bail!("the server does not support headers (NATS 2.2 and later do)");
    }
    let options = credentials(settings, role, info.nonce.as_deref())?;
    let line = serde_json::to_vec(&options).context("writing CONNECT")?;
    let out = connection.writer.buf();
    out.extend_from_slice(b"CONNECT ");
    out.extend_from_slice(&line);
    out.extend_from_slice(b"\r\nPING\r\n");
    connection.writer.flush().await?;
    loop {
        match connection.reader.next().await? {
            Frame::Pong => break,
            Frame::Err(text) => {
                let refused = text.to_string();
                if refused.to_ascii_lowercase().contains("authorization") {
                    bail!(
                        "authorization violation: the server refused {} ({refused})",
                        settings.who()
                    );
                }
                bail!("the server refused the connection: {refused}");
            }
            Frame::Ping => connection.writer.pong(),
            Frame::Ok | Frame::Info(_) => {}
            Frame::Msg(_) => bail!("a message before the handshake ended"),
        }
    }
    connection.writer.flush().await?;
    connection.info = info;
    Ok(connection)
}

fn credentials<'a>(
    settings: &'a ConnectSettings,
    role: &str,
    nonce: Option<&str>,
) -> Result<ConnectOptions<'a>> {
    let mut options = ConnectOptions {
        name: format!("{} {role}", settings.name),
        lang: "rust (jsbench direct)",
        version: env!("CARGO_PKG_VERSION"),
        protocol: 1,
        echo: true,
        headers: true,
        no_responders: true,
        ..ConnectOptions::default()
    };
    let sign = |seed: &str| -> Result<(String, String)> {
        let pair =
            nkeys::KeyPair::from_seed(seed).map_err(|e| anyhow!("reading the nkey seed: {e}"))?;
        let nonce = nonce.ok_or_else(|| anyhow!("the server sent no nonce to sign"))?;
        let signed = pair
            .sign(nonce.as_bytes())
            .map_err(|e| anyhow!("signing the server's nonce: {e}"))?;
        Ok((
            pair.public_key(),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signed),
        ))
    };
    match &settings.auth {
        Auth::None => {}
        Auth::UserPassword { user, password } => {
            options.user = Some(user);
            options.pass = Some(password.expose());
        }
        Auth::Token(token) => options.auth_token = Some(token.expose()),
        Auth::Nkey { seed, .. } => {
            let (public, sig) = sign(seed.expose())?;
            (options.nkey, options.sig) = (Some(public), Some(sig));
        }
        Auth::Creds { path, contents } => {
            let (jwt, seed) = creds(contents.expose())
                .with_context(|| format!("{} is not a NATS credentials file", path.display()))?;
            let (_, sig) = sign(seed)?;
            (options.jwt, options.sig) = (Some(jwt.to_string()), Some(sig));
        }
    }
    Ok(options)
}

/// The user JWT and the seed of a creds file: each the first non-blank line
/// after its `-----BEGIN ...-----` marker.
fn creds(text: &str) -> Result<(&str, &str)> {
    let after = |marker: &str| {
        let mut lines = text.lines().map(str::trim);
        lines.find(|l| l.contains(marker))?;
        lines.find(|l| !l.is_empty())
    };
    let jwt = after("BEGIN NATS USER JWT").ok_or_else(|| anyhow!("no user JWT"))?;
    let seed = after("BEGIN USER NKEY SEED").ok_or_else(|| anyhow!("no user nkey seed"))?;
    Ok((jwt, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_creds_file_gives_its_jwt_and_seed() {
        let text = "-----BEGIN NATS USER JWT-----\neyJ0eXAi.x.y\n------END NATS USER JWT------\n\n\
                    ************************* IMPORTANT *************************\n\n\
                    -----BEGIN USER NKEY SEED-----\nSUAAA\n------END USER NKEY SEED------\n";
        assert_eq!(creds(text).unwrap(), ("eyJ0eXAi.x.y", "SUAAA"));
        assert!(
            creds("nothing here")
                .unwrap_err()
                .to_string()
                .contains("JWT")
        );
    }
}
