//! A NATS connection spoken directly, for the paths where the client's own
//! cost is what is being cut.
//!
//! async-nats builds a `Message` per delivery (subject, reply and headers
//! allocated), passes every publish through a channel to its connection
//! task and wakes that task to write it (NOTES-async-nats.md measures what
//! that costs). Here a reader parses frames in place from one buffer
//! ([`frame`]) and a writer appends frames to one buffer that goes out in a
//! single system call from whichever thread calls [`Writer::flush`]: a
//! consumer answers everything one read brought with one write, a
//! publisher's sending thread writes its own messages.
//!
//! Plain TCP only: where the settings ask for TLS, callers use async-nats
//! instead and say so in their results. Authentication is the client
//! protocol's: user and password, token, nkey, or a creds file's JWT with
//! the nonce signed by its seed.

pub mod frame;
mod handshake;
pub mod jetstream;

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::connect::ConnectSettings;
pub use frame::{Frame, Msg};
pub use handshake::ServerInfo;

/// What one read asks the socket for; a frame larger than this grows the
/// buffer to fit.
const READ_CHUNK: usize = 64 * 1024;

/// The reading half: frames lent from its buffer until the next read.
pub struct Reader {
    half: OwnedReadHalf,
    buf: Vec<u8>,
    /// Unparsed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

/// The writing half: frames accumulate in its buffer until [`Writer::flush`].
pub struct Writer {
    half: OwnedWriteHalf,
    buf: Vec<u8>,
}

/// A connection ready for traffic: the handshake done, the server's INFO
/// read, the connection noted in `settings` as attached to that server.
pub struct Connection {
    pub reader: Reader,
    pub writer: Writer,
    pub info: ServerInfo,
}

/// Connects to the first server of `settings` that answers, as
/// `<name> <role>`; fails, naming why, when none does, when the settings
/// need TLS, or when the server refuses the credentials.
pub async fn connect(settings: &ConnectSettings, role: &str) -> Result<Connection> {
    if settings.tls.required {
        bail!(
            "the direct connection speaks plain TCP only and these settings require TLS ({})",
            settings.display_urls()
        );
    }
    let mut last = None;
    for addr in settings.servers() {
        let target = format!("{}:{}", addr.host(), addr.port());
        let attempt = tokio::time::timeout(settings.timeout, TcpStream::connect(&target)).await;
        match attempt {
            Ok(Ok(stream)) => {
                let connection = tokio::time::timeout(
                    settings.timeout * 2,
                    handshake::open(stream, settings, role),
                )
                .await
                .map_err(|_| anyhow!("no handshake within {:?}", settings.timeout * 2))
                .and_then(|r| r)
                .with_context(|| format!("connecting to {}", crate::connect::redact(&target)))?;
                settings.note_attached(role, &connection.info.node());
                return Ok(connection);
            }
            Ok(Err(e)) => last = Some(anyhow!(e).context(format!("connecting to {target}"))),
            Err(_) => {
                last = Some(anyhow!(
                    "connecting to {target}: no answer within {:?}",
                    settings.timeout
                ))
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow!("no server URL to connect to")))
}

impl Connection {
    fn new(stream: TcpStream, info: ServerInfo) -> Result<Connection> {
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let (read, write) = stream.into_split();
        Ok(Connection {
            reader: Reader {
                half: read,
                buf: vec![0; READ_CHUNK],
                start: 0,
                end: 0,
            },
            writer: Writer {
                half: write,
                buf: Vec::with_capacity(READ_CHUNK),
            },
            info,
        })
    }
}

impl Reader {
    /// The next frame already in the buffer, or `None` when a read is due.
    #[inline]
    pub fn try_next(&mut self) -> Result<Option<Frame<'_>>> {
        match frame::parse(&self.buf[self.start..self.end])? {
            Some(head) => {
                let from = self.start;
                self.start += head.len;
                Ok(Some(frame::lend(&self.buf[from..from + head.len], head)))
            }
            None => Ok(None),
        }
    }

    /// Whether a whole frame waits in the buffer.
    pub fn has_frame(&self) -> Result<bool> {
        Ok(frame::parse(&self.buf[self.start..self.end])?.is_some())
    }

    /// Reads what the socket has (waiting for at least one byte); an error
    /// when the server closed the connection.
    pub async fn fill(&mut self) -> Result<usize> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start > 0 && self.buf.len() - self.end < READ_CHUNK / 4 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.buf.len() - self.end < READ_CHUNK / 4 {
            // A frame larger than what is free: room for it and a read more.
            let grown = self.buf.len() + READ_CHUNK;
            self.buf.resize(grown, 0);
        }
        let n = self
            .half
            .read(&mut self.buf[self.end..])
            .await
            .context("reading from the server")?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        self.end += n;
        Ok(n)
    }

    /// The next frame, reading as needed.
    pub async fn next(&mut self) -> Result<Frame<'_>> {
        while !self.has_frame()? {
            self.fill().await?;
        }
        Ok(self.try_next()?.expect("a whole frame is buffered"))
    }
}

impl Writer {
    /// The buffer frames are appended to (with [`frame`]'s `put_*`).
    #[inline]
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes waiting for [`Writer::flush`].
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Writes everything appended since the last flush, on the caller's
    /// thread, and empties the buffer (keeping its capacity).
    pub async fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.half
            .write_all(&self.buf)
            .await
            .context("writing to the server")?;
        self.buf.clear();
        Ok(())
    }

    /// Appends the answer to a server's PING.
    pub fn pong(&mut self) {
        self.buf.extend_from_slice(b"PONG\r\n");
    }
}
