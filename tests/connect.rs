//! Connecting the way NATS users do, against real servers that demand it:
//! user/password, token, nkey and creds authentication, TLS with a private
//! CA, client certificates and TLS-first; natscli contexts; and clear
//! errors, free of secrets, when the server says no. Every server runs on
//! loopback with certificates and identities the test makes itself.

mod common;

use std::path::{Path, PathBuf};

use common::nats_auth::Decentralised;
use common::pki::Pki;
use common::{jsbench, run, text};
use jsbench::connect::{ConnectionFlags, ConnectionRequest, Environment, options::resolve};

const PASSWORD: &str = "pw-Zq81xK";

/// Resolves flags and environment as `jsbench run` would, connects, and
/// proves JetStream answers through the connection.
async fn connect(flags: ConnectionFlags, env: Environment) -> anyhow::Result<()> {
    let resolution = resolve(&ConnectionRequest { flags, env }, "t", None, false)?;
    let settings = resolution.remote.expect("a server was named");
    let client = settings.connect("test").await?;
    settings.jetstream(client).query_account().await?;
    Ok(())
}

fn flags(server: &str) -> ConnectionFlags {
    ConnectionFlags {
        server: Some(server.to_string()),
        ..Default::default()
    }
}

fn port_of(url: &str) -> &str {
    url.rsplit(':').next().unwrap()
}

/// Everything a user could see or keep: output and every results file.
fn assert_nowhere(secret: &str, stdout: &str, stderr: &str, results: &Path) {
    assert!(!stdout.contains(secret), "secret on stdout: {stdout}");
    assert!(!stderr.contains(secret), "secret on stderr: {stderr}");
    if !results.exists() {
        return;
    }
    let mut stack = vec![results.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                assert!(!text.contains(secret), "secret in {}", path.display());
            }
        }
    }
}

fn tiny_profile(dir: &Path) -> PathBuf {
    common::profile(
        dir,
        "tiny",
        &common::latency_body("[200]", "300ms", "0s", ""),
    )
}

#[test]
fn user_and_password_flags_run_end_to_end_and_no_secret_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(
        dir.path(),
        &format!("authorization {{ user: alice, password: \"{PASSWORD}\" }}\n"),
    );
    let profile = tiny_profile(dir.path());
    let out_dir = dir.path().join("results");
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-o",
        ])
        .arg(&out_dir)
        .args([
            "-s",
            server.url(),
            "--user",
            "alice",
            "--password",
            PASSWORD,
        ])
        .env_remove("NATS_URL"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("(user alice)"),
        "says who it is: {stdout}{stderr}"
    );
    assert_nowhere(PASSWORD, &stdout, &stderr, &out_dir);

    let summary = common::summary(&common::results_dir(&out_dir));
    let connection = summary.run.server.connection.expect("connection recorded");
    assert_eq!(connection.auth, "user/password");
    assert_eq!(connection.sources["password"], "--password");
    assert_eq!(connection.urls, server.url());
}

#[test]
fn a_wrong_password_exits_1_naming_the_user_but_not_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(
        dir.path(),
        &format!("authorization {{ user: alice, password: \"{PASSWORD}\" }}\n"),
    );
    let wrong = "wrong-Jq2v";
    let out_dir = dir.path().join("results");
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(&out_dir)
        .env("NATS_URL", server.url())
        .env("NATS_USER", "alice")
        .env("NATS_PASSWORD", wrong));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("authorization violation"), "{stderr}");
    assert!(
        stderr.contains("\"alice\"") && stderr.contains("NATS_PASSWORD"),
        "names the user and where the password came from: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_nowhere(wrong, &stdout, &stderr, &out_dir);

    // The same server without any credentials says what is missing.
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(&out_dir)
        .args(["-s", server.url()]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("requires authentication"), "{stderr}");
}

#[tokio::test]
async fn token_authentication_and_a_rejected_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(dir.path(), "authorization { token: \"t0ken-Xy9\" }\n");
    let mut good = flags(server.url());
    good.token = Some("t0ken-Xy9".into());
    connect(good, Environment::empty())
        .await
        .expect("token accepted");
    let env = Environment::empty()
        .with("NATS_URL", server.url())
        .with("NATS_TOKEN", "t0ken-Xy9");
    connect(ConnectionFlags::default(), env)
        .await
        .expect("NATS_TOKEN accepted");

    let mut bad = flags(server.url());
    bad.token = Some("not-it-7".into());
    let e = format!(
        "{:#}",
        connect(bad, Environment::empty()).await.unwrap_err()
    );
    assert!(
        e.contains("rejected the token") && e.contains("--token"),
        "{e}"
    );
    assert!(!e.contains("not-it-7"), "{e}");
}

#[tokio::test]
async fn nkey_authentication_through_the_flag_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let user = nkeys::KeyPair::new_user();
    let server = common::server_with_config(
        dir.path(),
        &format!(
            "authorization {{ users: [ {{ nkey: {} }} ] }}\n",
            user.public_key()
        ),
    );
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, format!("{}\n", user.seed().unwrap())).unwrap();
    let mut f = flags(server.url());
    f.nkey = Some(seed_file.clone());
    connect(f, Environment::empty())
        .await
        .expect("nkey accepted");
    let env = Environment::empty()
        .with("NATS_URL", server.url())
        .with("NATS_NKEY", seed_file.to_str().unwrap());
    connect(ConnectionFlags::default(), env)
        .await
        .expect("NATS_NKEY accepted");

    let stranger = dir.path().join("stranger.nk");
    let other = nkeys::KeyPair::new_user().seed().unwrap();
    std::fs::write(&stranger, &other).unwrap();
    let mut f = flags(server.url());
    f.nkey = Some(stranger);
    let e = format!("{:#}", connect(f, Environment::empty()).await.unwrap_err());
    assert!(
        e.contains("rejected the nkey") && e.contains("stranger.nk"),
        "{e}"
    );
    assert!(!e.contains(&other), "{e}");
}

#[test]
fn creds_file_authentication_runs_jetstream_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let identities = Decentralised::new();
    let server = common::server_with_config(dir.path(), &identities.server_config);
    let creds = dir.path().join("user.creds");
    std::fs::write(&creds, &identities.creds).unwrap();
    let profile = tiny_profile(dir.path());
    let out_dir = dir.path().join("results");
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-o",
        ])
        .arg(&out_dir)
        .args(["-s", server.url(), "--creds"])
        .arg(&creds));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let seed_line = identities
        .creds
        .lines()
        .find(|l| l.starts_with("SU"))
        .unwrap();
    assert_nowhere(seed_line, &stdout, &stderr, &out_dir);
    let summary = common::summary(&common::results_dir(&out_dir));
    assert_eq!(summary.run.server.connection.unwrap().auth, "creds");

    // Without the creds the server refuses, and says so.
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(&out_dir)
        .args(["-s", server.url()]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("authorization violation"), "{stderr}");
}

#[tokio::test]
async fn tls_with_a_private_ca_client_certificates_and_tls_first() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::create(dir.path());
    let tls_block = |extra: &str| {
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n{extra}}}\n",
            pki.server_cert.display(),
            pki.server_key.display()
        )
    };

    // Server TLS: trusted through --tlsca, or NATS_CA.
    let plain_dir = dir.path().join("plain");
    std::fs::create_dir(&plain_dir).unwrap();
    let server = common::server_with_config(&plain_dir, &tls_block(""));
    let url = format!("tls://127.0.0.1:{}", port_of(server.url()));
    let mut f = flags(&url);
    f.tlsca = Some(pki.ca.clone());
    connect(f, Environment::empty()).await.expect("CA trusted");
    let env = Environment::empty()
        .with("NATS_URL", &url)
        .with("NATS_CA", pki.ca.to_str().unwrap());
    connect(ConnectionFlags::default(), env)
        .await
        .expect("NATS_CA");

    // Untrusted: the wrong CA, or none.
    let mut f = flags(&url);
    f.tlsca = Some(pki.other_ca.clone());
    let e = format!("{:#}", connect(f, Environment::empty()).await.unwrap_err());
    assert!(
        e.contains("TLS failed") && e.contains("other-ca.pem"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        connect(flags(&url), Environment::empty())
            .await
            .unwrap_err()
    );
    assert!(e.contains("not trusted") && e.contains("--tlsca"), "{e}");

    // Mutual TLS: the server verifies a client certificate.
    let mtls_dir = dir.path().join("mtls");
    std::fs::create_dir(&mtls_dir).unwrap();
    let server = common::server_with_config(
        &mtls_dir,
        &tls_block(&format!(
            "  ca_file: \"{}\"\n  verify: true\n",
            pki.ca.display()
        )),
    );
    let url = format!("tls://127.0.0.1:{}", port_of(server.url()));
    let mut f = flags(&url);
    f.tlsca = Some(pki.ca.clone());
    f.tlscert = Some(pki.client_cert.clone());
    f.tlskey = Some(pki.client_key.clone());
    connect(f, Environment::empty())
        .await
        .expect("client certificate accepted");
    let mut f = flags(&url);
    f.tlsca = Some(pki.ca.clone());
    let e = format!("{:#}", connect(f, Environment::empty()).await.unwrap_err());
    assert!(
        e.contains("TLS failed"),
        "no client certificate must fail: {e}"
    );

    // TLS first: the server expects the handshake before its INFO.
    let first_dir = dir.path().join("first");
    std::fs::create_dir(&first_dir).unwrap();
    let server = common::server_with_config(&first_dir, &tls_block("  handshake_first: true\n"));
    let mut f = flags(&format!("nats://127.0.0.1:{}", port_of(server.url())));
    f.tlsca = Some(pki.ca.clone());
    f.tlsfirst = true;
    connect(f, Environment::empty())
        .await
        .expect("TLS-first handshake");
}

#[test]
fn a_context_file_carries_url_tls_and_credentials_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::create(dir.path());
    let server = common::server_with_config(
        dir.path(),
        &format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\nauthorization {{ user: alice, password: \"{PASSWORD}\" }}\n",
            pki.server_cert.display(),
            pki.server_key.display()
        ),
    );
    let config = dir.path().join("config");
    let contexts = config.join("nats").join("context");
    std::fs::create_dir_all(&contexts).unwrap();
    // What `nats context save` writes: every field, empty ones as "".
    let context = serde_json::json!({
        "description": "loopback staging", "url": format!("tls://127.0.0.1:{}", port_of(server.url())),
        "token": "", "user": "alice", "password": "env://STAGING_PW", "creds": "", "nkey": "",
        "cert": "", "key": "", "ca": pki.ca.display().to_string(), "nsc": "",
        "jetstream_domain": "", "jetstream_api_prefix": "", "jetstream_event_prefix": "",
        "inbox_prefix": "", "user_jwt": "", "color_scheme": "", "tls_first": false,
        "windows_cert_store": "", "windows_cert_match_by": "", "windows_cert_match": "",
        "windows_ca_certs_match": []
    });
    std::fs::write(contexts.join("staging.json"), context.to_string()).unwrap();
    let profile = tiny_profile(dir.path());
    let out_dir = dir.path().join("results");
    let base = || {
        let mut c = jsbench();
        c.args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-o",
        ])
        .arg(&out_dir)
        .env("XDG_CONFIG_HOME", &config)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT");
        c
    };

    let out = run(base()
        .args(["--context", "staging"])
        .env("STAGING_PW", PASSWORD));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("context staging"), "{stderr}");
    assert_nowhere(PASSWORD, &stdout, &stderr, &out_dir);
    let summary = common::summary(&common::results_dir(&out_dir));
    let connection = summary.run.server.connection.unwrap();
    assert_eq!(connection.context.as_deref(), Some("staging"));
    assert!(connection.tls);
    assert_eq!(connection.sources["ca"], "context staging");
    std::fs::remove_dir_all(&out_dir).unwrap();

    // NATS_CONTEXT selects it too; a flag overrides the context's password.
    let out = run(base()
        .env("NATS_CONTEXT", "staging")
        .env("STAGING_PW", PASSWORD)
        .args(["--password", "flag-wins-3"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("authorization violation") && stderr.contains("--password"),
        "{stderr}"
    );

    // The context file by path, and an unknown name listing the known ones.
    let out = run(base()
        .args(["--context"])
        .arg(contexts.join("staging.json"))
        .env("STAGING_PW", PASSWORD));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let out = run(base().args(["--context", "prod"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown context \"prod\"") && stderr.contains("staging"),
        "{stderr}"
    );
}

#[test]
fn an_untrusted_certificate_exits_1_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::create(dir.path());
    let server = common::server_with_config(
        dir.path(),
        &format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
            pki.server_cert.display(),
            pki.server_key.display()
        ),
    );
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .args(["-s", &format!("tls://127.0.0.1:{}", port_of(server.url()))])
        .env_remove("NATS_CA"));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("TLS failed") && stderr.contains("--tlsca"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_connection_input_exits_2_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.creds");
    let out = run(jsbench()
        .args(["run", "quick", "-s", "nats://127.0.0.1:1", "--creds"])
        .arg(&missing));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--creds") && stderr.contains("nope.creds"),
        "{stderr}"
    );

    let out = run(jsbench()
        .args(["run", "quick", "--user", "bob"])
        .env_remove("NATS_URL"));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no server"), "{stderr}");

    let out = run(jsbench()
        .args(["run", "quick", "-s", "nats://127.0.0.1:1"])
        .env("NATS_TIMEOUT", "soon"));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("NATS_TIMEOUT"), "{stderr}");

    let out = run(jsbench().args(["run", "quick", "--cluster", "4"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(jsbench().args(["run", "quick", "--cluster", "3", "-s", "nats://127.0.0.1:1"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cluster"), "{stderr}");
    let out = run(jsbench()
        .args(["run", "quick", "--replicas", "3"])
        .env_remove("NATS_URL"));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cluster 3"), "{stderr}");
}

#[test]
fn an_account_too_small_for_the_profile_is_refused_before_any_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(
        dir.path(),
        "accounts {\n  BENCH: {\n    jetstream: { max_file: 65536, max_mem: 65536, max_streams: 10, max_consumers: 10 }\n    users: [ { user: bench, password: bench } ]\n  }\n}\n",
    );
    // 1000 msg/s for 1 s of 128-byte messages: far more than 64 KiB.
    let profile = common::profile(
        dir.path(),
        "big",
        &common::latency_body("[1000]", "1s", "0s", ""),
    );
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-o",
        ])
        .arg(dir.path().join("results"))
        .args(["-s", server.url(), "--user", "bench", "--password", "bench"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("JetStream limits") && stderr.contains("file storage"),
        "{stderr}"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client =
            async_nats::ConnectOptions::with_user_and_password("bench".into(), "bench".into())
                .connect(server.url())
                .await
                .unwrap();
        let account = async_nats::jetstream::new(client)
            .query_account()
            .await
            .unwrap();
        assert_eq!(account.streams, 0, "nothing was created");
    });
}

/// An account as managed and multi-tenant deployments configure them
/// (../shared/NOTES-round2.md): nats-server refuses a stream without
/// max_bytes there, and jsbench sizes one for every stream it creates.
#[test]
fn an_account_that_requires_max_bytes_gets_it_sized_on_every_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(
        dir.path(),
        "accounts {\n  STRICT: {\n    jetstream: { max_mem: 1G, max_file: 8G, max_bytes_required: true }\n    users: [ { user: u, password: p } ]\n  }\n}\n",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let js = runtime.block_on(async {
        let client = async_nats::ConnectOptions::with_user_and_password("u".into(), "p".into())
            .connect(server.url())
            .await
            .unwrap();
        async_nats::jetstream::new(client)
    });
    // The server behaviour jsbench answers: no max_bytes, no stream.
    let refused = runtime.block_on(js.create_stream(async_nats::jetstream::stream::Config {
        name: "NO_MAX_BYTES".into(),
        subjects: vec!["nomax.>".into()],
        ..Default::default()
    }));
    let error = refused
        .expect_err("the account requires max_bytes")
        .to_string();
    assert!(error.contains("max bytes"), "{error}");

    // Streams from two paths (the shared one and the publish scenario's
    // own), kept so their configuration can be read.
    let body = format!(
        "{}\n[[scenario]]\nkind = \"publish\"\nduration = \"300ms\"\nrates = [500]\nmsg_id = \"unique\"\n",
        common::latency_body("[200]", "300ms", "0s", "")
    );
    let profile = common::profile(dir.path(), "strict", &body);
    let out_dir = dir.path().join("results");
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "--keep",
            "-o",
        ])
        .arg(&out_dir)
        .args(["-s", server.url(), "--user", "u", "--password", "p"])
        .env_remove("NATS_URL"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("the account requires max_bytes on every stream")
            && stderr.contains("16.0 MiB"),
        "says what it set and why: {stderr}"
    );
    let summary = common::summary(&common::results_dir(&out_dir));
    let sized = summary.run.server.stream_max_bytes.expect("recorded");
    assert_eq!(
        sized.bytes,
        16 << 20,
        "the floor: this profile stores little"
    );
    assert!(
        sized.expected > 0 && sized.expected < sized.bytes,
        "{sized:?}"
    );

    let max_bytes = runtime.block_on(async {
        use futures::StreamExt;
        let mut names = js.stream_names();
        let mut found = Vec::new();
        while let Some(name) = names.next().await {
            let name = name.unwrap();
            let mut stream = js.get_stream(&name).await.unwrap();
            found.push((name, stream.info().await.unwrap().config.max_bytes));
        }
        found
    });
    assert_eq!(max_bytes.len(), 2, "{max_bytes:?}");
    for (name, bytes) in max_bytes {
        assert_eq!(bytes, 16 << 20, "stream {name}");
    }
}
