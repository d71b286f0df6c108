//! NATS identities made by the test: user nkeys, and an operator, account
//! and user with JWTs for creds-file (decentralised) authentication, so the
//! creds path is tested against a real server without nsc.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nkeys::KeyPair;
use serde_json::{Value, json};

/// A signed NATS JWT: `header.claims.signature`, base64url without padding.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "jti": format!("JSBTEST{now}{subject}"),
        "iat": now,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let encode = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
    let signing_input = format!("{}.{}", encode(&header), encode(&claims));
    let signature = issuer.sign(signing_input.as_bytes()).unwrap();
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An operator-mode server configuration and a matching creds file.
pub struct Decentralised {
    /// nats-server configuration text (operator, memory resolver).
    pub server_config: String,
    /// Contents of a user creds file.
    pub creds: String,
}

impl Decentralised {
    pub fn new() -> Decentralised {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let user = KeyPair::new_user();
        let operator_jwt = jwt(
            &operator,
            &operator.public_key(),
            "jsbench-test-operator",
            json!({"type": "operator", "version": 2}),
        );
        let unlimited = json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
            "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1
        });
        let account_jwt = jwt(
            &operator,
            &account.public_key(),
            "jsbench-test-account",
            json!({"type": "account", "version": 2, "limits": unlimited,
                   "default_permissions": {"pub": {}, "sub": {}}}),
        );
        let user_jwt = jwt(
            &account,
            &user.public_key(),
            "jsbench-test-user",
            json!({"type": "user", "version": 2, "pub": {}, "sub": {},
                   "subs": -1, "data": -1, "payload": -1}),
        );
        // JetStream in operator mode needs a system account.
        let system = KeyPair::new_account();
        let system_jwt = jwt(
            &operator,
            &system.public_key(),
            "SYS",
            json!({"type": "account", "version": 2,
                   "limits": {"subs": -1, "data": -1, "payload": -1, "imports": -1,
                              "exports": -1, "wildcards": true, "conn": -1, "leaf": -1}}),
        );
        let server_config = format!(
            "operator: \"{operator_jwt}\"\nsystem_account: {sys}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {acc}: \"{account_jwt}\"\n  {sys}: \"{system_jwt}\"\n}}\n",
            acc = account.public_key(),
            sys = system.public_key(),
        );
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        );
        Decentralised {
            server_config,
            creds,
        }
    }
}
