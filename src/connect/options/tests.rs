use std::path::Path;

use super::*;

/// A temporary natscli config folder with contexts in it.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn env(&self) -> Environment {
        Environment::empty().with("XDG_CONFIG_HOME", self.dir.path().to_str().unwrap())
    }

    fn context(&self, name: &str, json: &str) {
        let dir = self.dir.path().join("nats").join("context");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.json")), json).unwrap();
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn request(flags: ConnectionFlags, env: Environment) -> ConnectionRequest {
    ConnectionRequest { flags, env }
}

fn remote(r: Result<Resolution, UsageError>) -> ConnectSettings {
    r.unwrap().remote.expect("a remote server")
}

#[test]
fn nothing_named_means_the_embedded_server_even_with_a_selected_context() {
    let home = Home::new();
    home.context("prod", r#"{"url":"nats://127.0.0.9:4222"}"#);
    std::fs::write(home.dir.path().join("nats").join("context.txt"), "prod").unwrap();
    let env = home.env().with("NATS_CREDS", "/ambient.creds");
    let r = resolve(&request(Default::default(), env), "p", None, false).unwrap();
    assert!(r.remote.is_none(), "embedded by default");
    assert_eq!(r.timeout, DEFAULT_TIMEOUT);
}

#[test]
fn flags_beat_environment_which_beats_the_profile_which_beats_the_context() {
    let home = Home::new();
    home.context(
        "staging",
        r#"{"url":"nats://127.0.0.2:4222","user":"ctx-user","password":"ctx-pass","jetstream_domain":"ctxdom"}"#,
    );
    let env = home
        .env()
        .with("NATS_CONTEXT", "staging")
        .with("NATS_USER", "env-user");
    let plan = ConnectionPlan {
        url: Some("nats://127.0.0.3:4222".into()),
        timeout: Some(Duration::from_secs(9)),
        jetstream_domain: Some("profdom".into()),
        ..Default::default()
    };
    // The profile's URL beats the context's; NATS_USER beats the context's
    // user; the context's password completes it.
    let s = remote(resolve(
        &request(Default::default(), env.clone()),
        "p",
        Some(&plan),
        false,
    ));
    assert_eq!(s.display_urls(), "nats://127.0.0.3:4222");
    assert_eq!(
        s.auth,
        Auth::UserPassword {
            user: "env-user".into(),
            password: Secret::new("ctx-pass")
        }
    );
    assert_eq!(s.sources["url"], "profile p connection.url");
    assert_eq!(s.sources["user"], "NATS_USER");
    assert_eq!(s.sources["password"], "context staging");
    assert_eq!(s.timeout, Duration::from_secs(9));
    assert_eq!(s.js_api, JsApi::Domain("profdom".into()));
    assert_eq!(s.context.as_deref(), Some("staging"));

    // Flags beat everything.
    let flags = ConnectionFlags {
        server: Some("nats://127.0.0.4:4222".into()),
        user: Some("flag-user".into()),
        password: Some("flag-pass".into()),
        timeout: Some(Duration::from_secs(2)),
        js_domain: Some("flagdom".into()),
        ..Default::default()
    };
    let s = remote(resolve(&request(flags, env), "p", Some(&plan), false));
    assert_eq!(s.display_urls(), "nats://127.0.0.4:4222");
    assert_eq!(
        s.auth,
        Auth::UserPassword {
            user: "flag-user".into(),
            password: Secret::new("flag-pass")
        }
    );
    assert_eq!(s.timeout, Duration::from_secs(2));
    assert_eq!(s.js_api, JsApi::Domain("flagdom".into()));
}

#[test]
fn a_context_flag_beats_nats_context_and_the_profile_context() {
    let home = Home::new();
    home.context("a", r#"{"url":"nats://127.0.0.5:4222"}"#);
    home.context("b", r#"{"url":"nats://127.0.0.6:4222"}"#);
    home.context("c", r#"{"url":"nats://127.0.0.7:4222"}"#);
    let plan = ConnectionPlan {
        context: Some("c".into()),
        ..Default::default()
    };
    let env = home.env().with("NATS_CONTEXT", "b");
    let flags = ConnectionFlags {
        context: Some("a".into()),
        ..Default::default()
    };
    let s = remote(resolve(
        &request(flags, env.clone()),
        "p",
        Some(&plan),
        false,
    ));
    assert_eq!(s.display_urls(), "nats://127.0.0.5:4222");
    let s = remote(resolve(
        &request(Default::default(), env),
        "p",
        Some(&plan),
        false,
    ));
    assert_eq!(s.display_urls(), "nats://127.0.0.6:4222");
    let s = remote(resolve(
        &request(Default::default(), home.env()),
        "p",
        Some(&plan),
        false,
    ));
    assert_eq!(s.display_urls(), "nats://127.0.0.7:4222");
}

#[test]
fn context_without_a_name_is_the_selected_one_and_without_url_natscli_default() {
    let home = Home::new();
    home.context("dev", r#"{"token":"t0k"}"#);
    std::fs::write(home.dir.path().join("nats").join("context.txt"), "dev\n").unwrap();
    let flags = ConnectionFlags {
        context: Some(String::new()),
        ..Default::default()
    };
    let s = remote(resolve(&request(flags, home.env()), "p", None, false));
    assert_eq!(s.display_urls(), "nats://127.0.0.1:4222");
    assert_eq!(s.auth, Auth::Token(Secret::new("t0k")));
    assert!(s.describe().contains("context dev"), "{}", s.describe());
    assert!(!format!("{s:?}").contains("t0k"));
}

#[test]
fn one_source_giving_two_methods_is_an_error_and_a_hidden_one_a_note() {
    let home = Home::new();
    let creds = home.file("u.creds", "not really");
    let flags = ConnectionFlags {
        server: Some("nats://127.0.0.1:4222".into()),
        user: Some("u".into()),
        creds: Some(creds),
        ..Default::default()
    };
    let e = resolve(&request(flags, home.env()), "p", None, false).unwrap_err();
    assert!(e.0.contains("--user and --creds"), "{e}");

    home.context("s", r#"{"url":"nats://127.0.0.1:4222","token":"abc"}"#);
    let flags = ConnectionFlags {
        context: Some("s".into()),
        user: Some("u".into()),
        password: Some("p".into()),
        ..Default::default()
    };
    let r = resolve(&request(flags, home.env()), "p", None, false).unwrap();
    assert!(matches!(r.remote.unwrap().auth, Auth::UserPassword { .. }));
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("ignoring token from context s")),
        "{:?}",
        r.notes
    );
}

#[test]
fn credentials_in_the_url_count_as_that_source() {
    let env = Environment::empty().with("NATS_URL", "nats://alice:pw@127.0.0.1:4222");
    let s = remote(resolve(
        &request(Default::default(), env.clone()),
        "p",
        None,
        false,
    ));
    assert_eq!(
        s.auth,
        Auth::UserPassword {
            user: "alice".into(),
            password: Secret::new("pw")
        }
    );
    assert_eq!(s.display_urls(), "nats://127.0.0.1:4222");
    // A token flag beats the URL's user.
    let flags = ConnectionFlags {
        token: Some("tk".into()),
        ..Default::default()
    };
    let s = remote(resolve(&request(flags, env), "p", None, false));
    assert_eq!(s.auth, Auth::Token(Secret::new("tk")));
}

#[test]
fn credentials_without_a_server_are_an_error_unless_ambient() {
    let flags = ConnectionFlags {
        user: Some("u".into()),
        ..Default::default()
    };
    let e = resolve(&request(flags, Environment::empty()), "p", None, false).unwrap_err();
    assert!(e.0.contains("--user") && e.0.contains("no server"), "{e}");
    let plan = ConnectionPlan {
        creds: Some("/x.creds".into()),
        ..Default::default()
    };
    let e = resolve(
        &request(Default::default(), Environment::empty()),
        "p",
        Some(&plan),
        false,
    )
    .unwrap_err();
    assert!(e.0.contains("connection.creds"), "{e}");
}

#[test]
fn cluster_refuses_named_servers_and_ignores_ambient_ones() {
    let flags = ConnectionFlags {
        server: Some("nats://127.0.0.1:4222".into()),
        ..Default::default()
    };
    let e = resolve(&request(flags, Environment::empty()), "p", None, true).unwrap_err();
    assert!(e.0.contains("--cluster") && e.0.contains("--server"), "{e}");
    let env = Environment::empty().with("NATS_URL", "nats://127.0.0.1:4222");
    let r = resolve(&request(Default::default(), env), "p", None, true).unwrap();
    assert!(r.remote.is_none());
    assert!(
        r.notes.iter().any(|n| n.contains("NATS_URL")),
        "{:?}",
        r.notes
    );
}

#[test]
fn files_are_checked_before_anything_starts() {
    let home = Home::new();
    let server = Some("nats://127.0.0.1:4222".to_string());
    let missing = home.dir.path().join("missing.creds");
    let flags = ConnectionFlags {
        server: server.clone(),
        creds: Some(missing.clone()),
        ..Default::default()
    };
    let e = resolve(&request(flags, home.env()), "p", None, false).unwrap_err();
    assert!(
        e.0.contains("--creds") && e.0.contains("missing.creds"),
        "{e}"
    );

    let not_a_seed = home.file("seed.nk", "SUnotaseedatall\n");
    let flags = ConnectionFlags {
        server: server.clone(),
        nkey: Some(not_a_seed),
        ..Default::default()
    };
    let e = resolve(&request(flags, home.env()), "p", None, false).unwrap_err();
    assert!(e.0.contains("--nkey") && !e.0.contains("SUnotaseed"), "{e}");

    let seed = nkeys::KeyPair::new_user().seed().unwrap();
    let good = home.file("good.nk", &format!("# a user seed\n{seed}\n"));
    let flags = ConnectionFlags {
        server: server.clone(),
        nkey: Some(good),
        ..Default::default()
    };
    let s = remote(resolve(&request(flags, home.env()), "p", None, false));
    assert!(matches!(&s.auth, Auth::Nkey { seed: got, .. } if got.expose() == seed));

    let key_not_cert = home.file(
        "k.pem",
        "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
    );
    let flags = ConnectionFlags {
        server: server.clone(),
        tlsca: Some(key_not_cert.clone()),
        ..Default::default()
    };
    let e = resolve(&request(flags, home.env()), "p", None, false).unwrap_err();
    assert!(
        e.0.contains("--tlsca") && e.0.contains("CERTIFICATE"),
        "{e}"
    );

    let flags = ConnectionFlags {
        server,
        tlskey: Some(key_not_cert),
        ..Default::default()
    };
    let e = resolve(&request(flags, home.env()), "p", None, false).unwrap_err();
    assert!(e.0.contains("--tlskey") && e.0.contains("--tlscert"), "{e}");
}

#[test]
fn tls_options_require_tls_and_bad_timeouts_name_the_variable() {
    let flags = ConnectionFlags {
        server: Some("nats://127.0.0.1:4222".into()),
        tlsfirst: true,
        ..Default::default()
    };
    let s = remote(resolve(
        &request(flags, Environment::empty()),
        "p",
        None,
        false,
    ));
    assert!(s.tls.required && s.tls.first);

    let env = Environment::empty().with("NATS_TIMEOUT", "soon");
    let e = resolve(&request(Default::default(), env), "p", None, false).unwrap_err();
    assert!(e.0.contains("NATS_TIMEOUT"), "{e}");
}

#[test]
fn profiles_of_one_run_must_agree_on_the_server() {
    let a = ConnectionPlan {
        url: Some("nats://127.0.0.1:4222".into()),
        ..Default::default()
    };
    let b = ConnectionPlan {
        url: Some("nats://127.0.0.1:4333".into()),
        ..Default::default()
    };
    let req = request(Default::default(), Environment::empty());
    let e = resolve_all(&req, [("a", Some(&a)), ("b", Some(&b))], false).unwrap_err();
    assert!(e.0.contains("profiles a and b"), "{e}");
    assert!(resolve_all(&req, [("a", Some(&a)), ("c", Some(&a))], false).is_ok());
    // A flag overrides both, so they agree.
    let flags = ConnectionFlags {
        server: Some("nats://127.0.0.1:4444".into()),
        ..Default::default()
    };
    let req = request(flags, Environment::empty());
    assert!(resolve_all(&req, [("a", Some(&a)), ("b", Some(&b))], false).is_ok());
}

#[test]
fn paths_expand_home_and_variables() {
    let home = Home::new();
    let ca = home.file(
        "ca.pem",
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    );
    let env = Environment::empty()
        .with("HOME", home.dir.path().to_str().unwrap())
        .with("NATS_URL", "tls://127.0.0.1:4222")
        .with("NATS_CA", "~/ca.pem");
    let s = remote(resolve(&request(Default::default(), env), "p", None, false));
    assert_eq!(s.tls.ca.as_deref(), Some(Path::new(&ca)));
    assert_eq!(s.sources["ca"], "NATS_CA");
}

#[test]
fn debug_output_of_the_inputs_masks_secrets() {
    let flags = ConnectionFlags {
        server: Some("nats://u:urlpw@127.0.0.1:4222".into()),
        password: Some("flagpw".into()),
        token: Some("flagtok".into()),
        ..Default::default()
    };
    let env = Environment::empty().with("NATS_PASSWORD", "envpw");
    let text = format!("{:?}", request(flags, env));
    for secret in ["urlpw", "flagpw", "flagtok", "envpw"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}
