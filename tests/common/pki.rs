//! Certificates made by the test itself: a private CA, a server
//! certificate for 127.0.0.1 and localhost, a client certificate, and a
//! second CA nobody trusts. Nothing is read from or sent to the outside.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// PEM files in a folder the test owns.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed nothing the server presents.
    pub other_ca: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

impl Pki {
    pub fn create(dir: &Path) -> Pki {
        let authority = ca("jsbench test CA");
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };

        let mut server =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        server
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
        let server_key = KeyPair::generate().unwrap();
        let server_cert = server.signed_by(&server_key, &authority).unwrap();

        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client
            .distinguished_name
            .push(DnType::CommonName, "jsbench client");
        client
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
        let client_key = KeyPair::generate().unwrap();
        let client_cert = client.signed_by(&client_key, &authority).unwrap();

        Pki {
            ca: write("ca.pem", authority.pem()),
            server_cert: write("server-cert.pem", server_cert.pem()),
            server_key: write("server-key.pem", server_key.serialize_pem()),
            client_cert: write("client-cert.pem", client_cert.pem()),
            client_key: write("client-key.pem", client_key.serialize_pem()),
            other_ca: write("other-ca.pem", ca("someone else's CA").pem()),
        }
    }
}
