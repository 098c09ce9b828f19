//! `--ciphers`: the cipher suites a client or server may use, parsed from IANA or OpenSSL names
//! while the command line is, and turned into the TLS provider the configuration takes.

use sockeye::tls::rustls::{self, SupportedCipherSuite};

/// The cipher suites `--ciphers` allows.
#[derive(Debug, Clone)]
pub struct CipherList(Vec<SupportedCipherSuite>);

/// OpenSSL's names of the TLS 1.2 suites rustls implements (TLS 1.3 names are IANA's).
const OPENSSL_NAMES: [(&str, &str); 6] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// The IANA name of a suite (rustls spells TLS 1.3 ones `TLS13_…`).
fn iana_name(suite: &SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite()).replacen("TLS13_", "TLS_", 1)
}

pub(crate) fn cipher_list(s: &str) -> Result<CipherList, String> {
    let all = rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES;
    let names: Vec<&str> = s.split([':', ',', ' ']).filter(|n| !n.is_empty()).collect();
    if names.is_empty() || names.iter().any(|n| n.eq_ignore_ascii_case("DEFAULT")) {
        return Ok(CipherList(all.to_vec()));
    }
    let mut chosen = Vec::new();
    for name in names {
        let iana = OPENSSL_NAMES
            .iter()
            .find(|(openssl, _)| openssl.eq_ignore_ascii_case(name))
            .map_or(name, |(_, iana)| iana)
            .replacen("TLS13_", "TLS_", 1);
        let Some(suite) = all
            .iter()
            .find(|suite| iana_name(suite).eq_ignore_ascii_case(&iana))
        else {
            let known: Vec<String> = all.iter().map(iana_name).collect();
            return Err(format!(
                "unknown cipher suite {name:?}; known: {}",
                known.join(":")
            ));
        };
        if !chosen
            .iter()
            .any(|c: &SupportedCipherSuite| c.suite() == suite.suite())
        {
            chosen.push(*suite);
        }
    }
    Ok(CipherList(chosen))
}

impl CipherList {
    /// The aws-lc-rs provider restricted to these suites.
    pub(crate) fn provider(&self) -> std::sync::Arc<rustls::crypto::CryptoProvider> {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.cipher_suites = self.0.clone();
        std::sync::Arc::new(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_names_map_to_suites() {
        let names = |s| cipher_list(s).map(|l| l.0.iter().map(iana_name).collect::<Vec<_>>());
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_256_GCM_SHA384").unwrap_or_default(),
            ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"]
        );
        assert!(names("RC4-MD5").is_err());
        assert_eq!(names("DEFAULT").map(|l| l.len()).unwrap_or_default(), 9);
    }
}
