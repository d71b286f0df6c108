//! The direct connection (src/wire) against a real server: frames both
//! ways, the JetStream API through it, and every authentication method
//! the async-nats connections accept, accepted and refused.

mod common;

use std::time::Duration;

use common::nats_auth::Decentralised;
use jsbench::connect::{ConnectSettings, ConnectionFlags};
use jsbench::wire::{self, Frame, frame};

fn settings(flags: ConnectionFlags) -> ConnectSettings {
    common::connect_settings(flags)
}

fn flags(server: &str) -> ConnectionFlags {
    ConnectionFlags {
        server: Some(server.to_string()),
        ..Default::default()
    }
}

/// The next message frame, answering PINGs on the way.
async fn next_message(c: &mut wire::Connection) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let read = async {
        loop {
            match c.reader.next().await.expect("a frame") {
                Frame::Msg(m) => {
                    return (
                        m.subject.to_vec(),
                        m.reply.to_vec(),
                        m.headers.to_vec(),
                        m.payload.to_vec(),
                    );
                }
                Frame::Ping => c.writer.pong(),
                // The server's updated INFO after CONNECT (connect_info).
                Frame::Info(_) | Frame::Ok => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a message within 10 s")
}

#[tokio::test]
async fn frames_go_both_ways_and_the_jetstream_api_answers() {
    let server = common::server();
    let s = settings(flags(server.url()));
    let mut c = wire::connect(&s, "wire-test").await.expect("connects");
    assert!(c.info.headers);
    assert!(
        s.seen_servers()
            .iter()
            .any(|n| n.name == c.info.server_name),
        "the connection is noted as attached"
    );
    let out = c.writer.buf();
    frame::put_sub(out, b"t.>", 1);
    frame::put_pub(out, b"t.one", b"r.1", b"hello");
    frame::put_hpub(out, b"t.two", b"", b"NATS/1.0\r\nK: v\r\n\r\n", b"yo");
    c.writer.flush().await.unwrap();
    let (subject, reply, headers, payload) = next_message(&mut c).await;
    assert_eq!(
        (&subject[..], &reply[..], &headers[..], &payload[..]),
        (&b"t.one"[..], &b"r.1"[..], &b""[..], &b"hello"[..])
    );
    let (subject, _, headers, payload) = next_message(&mut c).await;
    assert_eq!((&subject[..], &payload[..]), (&b"t.two"[..], &b"yo"[..]));
    assert!(headers.windows(4).any(|w| w == b"K: v"), "{headers:?}");

    // A JetStream API request and its reply on an inbox.
    let out = c.writer.buf();
    frame::put_sub(out, b"_INBOX.wire.1", 2);
    frame::put_pub(out, b"$JS.API.INFO", b"_INBOX.wire.1", b"");
    c.writer.flush().await.unwrap();
    let (subject, _, _, payload) = next_message(&mut c).await;
    assert_eq!(subject, b"_INBOX.wire.1");
    let text = String::from_utf8_lossy(&payload);
    assert!(text.contains("account_info_response"), "{text}");
}

#[tokio::test]
async fn user_password_nkey_and_token_are_accepted_and_a_wrong_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let user = nkeys::KeyPair::new_user();
    let server = common::server_with_config(
        dir.path(),
        &format!(
            "authorization {{ users: [ {{ user: alice, password: pw1 }}, {{ nkey: {} }} ] }}\n",
            user.public_key()
        ),
    );
    let mut f = flags(server.url());
    f.user = Some("alice".into());
    f.password = Some("pw1".into());
    wire::connect(&settings(f.clone()), "t")
        .await
        .expect("user/password accepted");
    f.password = Some("wrong".into());
    let e = format!(
        "{:#}",
        wire::connect(&settings(f), "t")
            .await
            .err()
            .expect("refused")
    );
    assert!(
        e.contains("authorization violation") && e.contains("alice"),
        "{e}"
    );
    assert!(!e.contains("wrong"), "no secret in the error: {e}");

    let seed = dir.path().join("user.nk");
    std::fs::write(&seed, user.seed().unwrap()).unwrap();
    let mut f = flags(server.url());
    f.nkey = Some(seed);
    wire::connect(&settings(f), "t")
        .await
        .expect("nkey accepted");
    let stranger = dir.path().join("stranger.nk");
    std::fs::write(&stranger, nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    let mut f = flags(server.url());
    f.nkey = Some(stranger);
    assert!(
        wire::connect(&settings(f), "t").await.is_err(),
        "a stranger's nkey is refused"
    );

    let token_dir = tempfile::tempdir().unwrap();
    let server =
        common::server_with_config(token_dir.path(), "authorization { token: \"tk-77\" }\n");
    let mut f = flags(server.url());
    f.token = Some("tk-77".into());
    wire::connect(&settings(f.clone()), "t")
        .await
        .expect("token accepted");
    f.token = Some("tk-78".into());
    assert!(
        wire::connect(&settings(f), "t").await.is_err(),
        "a wrong token is refused"
    );
}

#[tokio::test]
async fn a_creds_file_signs_the_nonce() {
    let dir = tempfile::tempdir().unwrap();
    let identities = Decentralised::new();
    let server = common::server_with_config(dir.path(), &identities.server_config);
    let creds = dir.path().join("user.creds");
    std::fs::write(&creds, &identities.creds).unwrap();
    let mut f = flags(server.url());
    f.creds = Some(creds);
    let mut c = wire::connect(&settings(f), "t")
        .await
        .expect("creds accepted");
    frame::put_sub(c.writer.buf(), b"x", 1);
    frame::put_pub(c.writer.buf(), b"x", b"", b"1");
    c.writer.flush().await.unwrap();
    assert_eq!(next_message(&mut c).await.3, b"1");
    let e = format!(
        "{:#}",
        wire::connect(&settings(flags(server.url())), "t")
            .await
            .err()
            .expect("refused")
    );
    assert!(e.contains("authorization violation"), "{e}");
}

#[tokio::test]
async fn settings_that_need_tls_are_refused_by_name() {
    let server = common::server();
    let mut f = flags(server.url());
    f.tlsfirst = true;
    let s = settings(f);
    let e = format!("{:#}", wire::connect(&s, "t").await.err().expect("refused"));
    assert!(e.contains("TLS"), "{e}");
}
