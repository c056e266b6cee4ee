//! How runws reaches a PostgreSQL server: the URL, with libpq's environment
//! variables and password file filling in what it leaves out, TLS (rustls,
//! no OpenSSL) in libpq's `sslmode`s, and errors that name their cause.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (default) | when the server offers it, else plaintext | not checked |
//! | `require` | always | not checked, unless a root certificate is given: then as `verify-ca` (libpq's rule) |
//! | `verify-ca` | always | signed by a CA in `sslrootcert` |
//! | `verify-full` | always | signed by such a CA and valid for the host named |
//!
//! `sslrootcert` (or `PGSSLROOTCERT`, else `~/.postgresql/root.crt` when it
//! exists) is a PEM file of CA certificates; `system` takes the system's
//! (`SSL_CERT_FILE`, else `/etc/ssl/certs/ca-certificates.crt`), and makes
//! `verify-full` the default and weaker modes an error (libpq 16).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` tries plaintext first; runws does not.
            other => {
                return Err(format!(
                    "sslmode `{other}` is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where and how to connect.
pub struct Target {
    pub config: postgres::Config,
    pub mode: SslMode,
    /// The CA certificates the server's must chain to (`verify-*`).
    pub root_cert: Option<PathBuf>,
    /// The host TLS checks the certificate against, for messages.
    pub host: String,
    /// Where the password came from, when not from the URL: for messages.
    pub password_from: Option<String>,
}

/// The environment as libpq reads it.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
}

/// The process's own environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }
}

/// Decodes `%XX` escapes (a URL's query values).
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = super::percent_decode(s).ok_or_else(|| format!("bad escape in `{s}`"))?;
    String::from_utf8(bytes).map_err(|_| format!("`{s}` is not UTF-8 once decoded"))
}

/// The target of `url`, completed from `env` as libpq would: `PGHOST`,
/// `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`,
/// `PGSSLROOTCERT`, then the password file (`PGPASSFILE`, else
/// `~/.pgpass`). What the URL says wins.
pub fn target(url: &str, env: &dyn Env) -> Result<Target, String> {
    // runws's own parameters come out of the query; the rest is the
    // client library's to parse.
    //
    // libpq reads a user and password in the authority only (up to the
    // first `/` or `?`); the client library takes them up to the first `@`
    // anywhere, which would read a password holding an unescaped `/` (one
    // the redacted URL shows) or take `?user=ann@db` for credentials and
    // `db` for the host. So any later `@` reaches it escaped, as `%40`,
    // which it decodes back in the database name and query.
    let (scheme, after) = url.split_once("://").unwrap_or(("", url));
    let authority_end = after.find(['/', '?']).unwrap_or(after.len());
    let (authority, tail) = after.split_at(authority_end);
    let tail = tail.replace('@', "%40");
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, q),
        None => (tail.as_str(), ""),
    };
    let mut mode = None;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        // libpq decodes keys as well as values.
        match percent_decode(k)?.as_str() {
            "sslmode" => mode = Some(SslMode::parse(&percent_decode(v)?)?),
            "sslrootcert" => root_cert = Some(percent_decode(v)?),
            _ => kept.push(pair),
        }
    }
    let base = format!("{scheme}://{authority}{path}");
    let rest = if kept.is_empty() { base } else { format!("{base}?{}", kept.join("&")) };
    let mut config: postgres::Config = rest.parse().map_err(|e: postgres::Error| {
        use std::error::Error as _;
        // The cause (`unknown option `sslcert``) is in the source; neither
        // names a password.
        match e.source() {
            Some(why) => format!("{e}: {why}"),
            None => e.to_string(),
        }
    })?;
    // A `hostaddr` without a host names no host: TLS gets `localhost`
    // (which only verify-full would check, and it is refused below), the
    // password file the address, as libpq matches it.
    let mut named = true;
    if config.get_hosts().is_empty() {
        match env.var("PGHOST") {
            Some(h) if h.starts_with('/') => config.host_path(h),
            Some(h) => config.host(&h),
            None if !config.get_hostaddrs().is_empty() => {
                named = false;
                for _ in 0..config.get_hostaddrs().len() {
                    config.host("localhost");
                }
                &mut config
            }
            None => config.host("localhost"),
        };
    }
    if config.get_ports().is_empty()
        && let Some(p) = env.var("PGPORT")
    {
        config.port(p.parse().map_err(|_| format!("PGPORT `{p}` is not a port number"))?);
    }
    if config.get_user().is_none() {
        let user = env
            .var("PGUSER")
            .or_else(|| env.var("USER"))
            .or_else(|| env.var("LOGNAME"))
            .ok_or("no user: give one in the URL or PGUSER")?;
        config.user(&user);
    }
    if config.get_dbname().is_none()
        && let Some(d) = env.var("PGDATABASE")
    {
        config.dbname(&d);
    }
    let host = match (config.get_hosts().first(), config.get_hostaddrs().first()) {
        (_, Some(addr)) if !named => addr.to_string(),
        (Some(postgres::config::Host::Tcp(h)), _) => h.clone(),
        _ => "localhost".to_string(),
    };
    let mut password_from = None;
    if config.get_password().is_none() {
        if let Some(p) = env.var("PGPASSWORD") {
            config.password(p);
            password_from = Some("PGPASSWORD".into());
        } else if let Some((file, p)) = from_password_file(&config, &host, env) {
            config.password(p);
            password_from = Some(file.display().to_string());
        }
    }
    let mode = match mode {
        Some(m) => Some(m),
        None => match env.var("PGSSLMODE") {
            Some(m) => Some(SslMode::parse(&m).map_err(|e| format!("PGSSLMODE: {e}"))?),
            None => None,
        },
    };
    let root_cert = root_cert.or_else(|| env.var("PGSSLROOTCERT")).map(PathBuf::from).or_else(|| {
        let default = env.home()?.join(".postgresql/root.crt");
        default.exists().then_some(default)
    });
    // libpq (16): the system's roots make verify-full the default and any
    // weaker mode an error, since any public CA signs a name for whoever
    // holds it.
    let system = root_cert.as_deref() == Some(Path::new("system"));
    let mode = match mode {
        Some(m) if system && m != SslMode::VerifyFull => {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full, not {} (a public CA signs names for anyone)",
                m.name()
            ));
        }
        Some(m) => m,
        None if system => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    if mode == SslMode::VerifyFull && !named {
        return Err("sslmode=verify-full needs a host name to check the server's certificate against: \
                    hostaddr alone names none (give host= as well)"
            .into());
    }
    // libpq: `require` with a root certificate checks the chain.
    let mode = if mode == SslMode::Require && root_cert.is_some() { SslMode::VerifyCa } else { mode };
    Ok(Target { config, mode, root_cert, host, password_from })
}

/// The password for `config`'s host, port, database and user from the
/// password file, as libpq reads it: lines `host:port:database:user:password`,
/// `*` matching anything, `\` escaping `:` and `\`; the first match wins. A
/// file others may read is ignored, with a warning, as libpq does.
fn from_password_file(config: &postgres::Config, host: &str, env: &dyn Env) -> Option<(PathBuf, String)> {
    use std::os::unix::fs::MetadataExt;
    let path = env.var("PGPASSFILE").map(PathBuf::from).or_else(|| Some(env.home()?.join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.mode() & 0o077 != 0 {
        eprintln!(
            "runws: warning: password file `{}` has group or world access; permissions should be 0600 or less (ignored)",
            path.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let want = [host, port.as_str(), db, user];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_escaped(line);
        if fields.len() < 5 {
            continue;
        }
        // A bare `*` matches anything; an escaped one is a star. The
        // password ends at the next unescaped `:`, as libpq reads it.
        if want.iter().zip(&fields).all(|(w, (f, star))| *star || f == w) {
            return Some((path, fields[4].0.clone()));
        }
    }
    None
}

/// Splits a password-file line at unescaped `:`, unescaping `\:` and `\\`:
/// each field, and whether it was a bare `*`.
fn split_escaped(line: &str) -> Vec<(String, bool)> {
    let mut out = vec![(String::new(), false)];
    let mut raw = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                raw.push(c);
                if let Some(n) = chars.next() {
                    out.last_mut().expect("one field at least").0.push(n);
                }
            }
            ':' => {
                out.last_mut().expect("one field at least").1 = raw == "*";
                raw.clear();
                out.push((String::new(), false));
            }
            c => {
                raw.push(c);
                out.last_mut().expect("one field at least").0.push(c);
            }
        }
    }
    out.last_mut().expect("one field at least").1 = raw == "*";
    out
}

/// The TLS side of a connection in `t.mode` (`None` for `disable`).
pub fn connector(t: &Target) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match t.mode {
        SslMode::Disable => return Ok(None),
        SslMode::Prefer | SslMode::Require => Arc::new(Unchecked(provider.clone())),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let path = t.root_cert.as_deref().ok_or_else(|| {
                format!(
                    "sslmode={} needs the CA certificates to check the server's against: \
                     give sslrootcert=FILE (or PGSSLROOTCERT, or ~/.postgresql/root.crt)",
                    t.mode.name()
                )
            })?;
            let roots = roots(path)?;
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| format!("cannot use the CA certificates in `{}`: {e}", path.display()))?;
            if t.mode == SslMode::VerifyCa { Arc::new(AnyName(webpki)) } else { webpki }
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(tokio_postgres_rustls::MakeRustlsConnect::new(config)))
}

/// The CA certificates in the PEM file `path` (`system`: the system's).
fn roots(path: &Path) -> Result<Arc<rustls::RootCertStore>, String> {
    use rustls::pki_types::pem::PemObject;
    let file = if path == Path::new("system") {
        std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"))
    } else {
        path.to_path_buf()
    };
    let mut store = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&file)
        .map_err(|e| format!("cannot read the CA certificates `{}`: {e}", file.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("cannot read the CA certificates `{}`: {e}", file.display()))?;
        store.add(cert).map_err(|e| format!("a CA certificate in `{}` is unusable: {e}", file.display()))?;
    }
    if store.is_empty() {
        return Err(format!("`{}` holds no CA certificate", file.display()));
    }
    Ok(Arc::new(store))
}

/// `prefer` and `require` without a root certificate: encrypted, the
/// server's certificate not checked (libpq's behaviour); the handshake's
/// signatures are still verified, so the session is with the holder of
/// the key it presented.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Why a connection failed, in words a person can act on: the server's own
/// message, the system's error, or what the certificate check found. Never
/// the password.
pub fn explain(e: &postgres::Error, t: &Target) -> String {
    use std::error::Error as _;
    if let Some(db) = e.as_db_error() {
        let mut why = format!("the server says: {}", db.message());
        if db.code() == &postgres::error::SqlState::INVALID_PASSWORD
            && let Some(from) = &t.password_from
        {
            why.push_str(&format!(" (the password came from {from})"));
        }
        return why;
    }
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let tls = s
            .downcast_ref::<rustls::Error>()
            .or_else(|| s.downcast_ref::<std::io::Error>()?.get_ref()?.downcast_ref::<rustls::Error>());
        if let Some(tls) = tls {
            return explain_tls(tls, t);
        }
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

fn explain_tls(e: &rustls::Error, t: &Target) -> String {
    let ca = || t.root_cert.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "certificate verify failed: the server's certificate is not signed by a CA in `{}` (sslmode={})",
            ca(),
            t.mode.name()
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "certificate verify failed: the server's certificate is not valid for host `{}` \
             (sslmode=verify-full; connect by a name the certificate holds)",
            t.host
        ),
        rustls::Error::InvalidCertificate(c) => {
            format!("certificate verify failed: {c:?} (sslmode={}, CA `{}`)", t.mode.name(), ca())
        }
        other => format!("TLS: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Fake(HashMap<&'static str, String>, Option<PathBuf>);

    impl Env for Fake {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
        fn home(&self) -> Option<PathBuf> {
            self.1.clone()
        }
    }

    fn env(vars: &[(&'static str, &str)], home: Option<PathBuf>) -> Fake {
        Fake(vars.iter().map(|(k, v)| (*k, v.to_string())).collect(), home)
    }

    #[test]
    fn the_url_wins_and_the_environment_fills_in() {
        let e = env(
            &[
                ("PGHOST", "db.example"),
                ("PGPORT", "6543"),
                ("PGUSER", "ann"),
                ("PGPASSWORD", "pw"),
                ("PGDATABASE", "jobs"),
                ("PGSSLMODE", "require"),
            ],
            None,
        );
        let t = target("postgres://", &e).unwrap();
        assert_eq!(t.host, "db.example");
        assert_eq!(t.config.get_ports(), &[6543]);
        assert_eq!(t.config.get_user(), Some("ann"));
        assert_eq!(t.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(t.config.get_dbname(), Some("jobs"));
        assert_eq!(t.mode, SslMode::Require);
        let t = target("postgres://bob:secret@h:1/d?sslmode=verify-full&sslrootcert=%2Fca.pem", &e).unwrap();
        assert_eq!((t.host.as_str(), t.config.get_user()), ("h", Some("bob")));
        assert_eq!(t.config.get_password(), Some(&b"secret"[..]));
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert, Some(PathBuf::from("/ca.pem")));
        assert!(target("postgres://h/d?sslmode=allow", &e).is_err());
        // libpq: `require` with a root certificate checks the chain.
        assert_eq!(
            target("postgres://u@h/d?sslmode=require&sslrootcert=/ca", &e).unwrap().mode,
            SslMode::VerifyCa
        );
        assert_eq!(target("postgres://u@h/d", &env(&[], None)).unwrap().mode, SslMode::Prefer);
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:ann:no\nh:5432:jobs:ann:pa\\:ss\\\\w\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = env(&[], Some(dir.path().to_path_buf()));
        let t = target("postgres://ann@h/jobs", &e).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"pa:ss\\w"[..]));
        let t = target("postgres://ann@h/elsewhere", &e).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"fallback"[..]));
        // Readable by others: ignored.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(target("postgres://ann@h/jobs", &e).unwrap().config.get_password(), None);
    }

    #[test]
    fn credentials_are_read_from_the_authority_only() {
        // libpq: the user and password end the authority; an `@` in a query
        // value (an Azure-style `user@server`) is part of that value.
        let t = target("postgres://db.example:5433/jobs?user=alice@db", &env(&[], None)).unwrap();
        assert_eq!((t.host.as_str(), t.config.get_user()), ("db.example", Some("alice@db")));
        assert_eq!(t.config.get_ports(), &[5433]);
        // An unescaped `/` in a password ends the authority, as libpq reads it:
        // never a password the redacted URL would show.
        if let Ok(t) = target("postgres://u:pa/ss@h/d", &env(&[], None)) {
            assert_ne!(t.config.get_password(), Some(&b"pa/ss"[..]));
            assert_ne!(t.host, "h");
        }
    }

    #[test]
    fn query_keys_and_values_are_percent_decoded_strictly() {
        let e = env(&[], None);
        // libpq decodes keys too: this is sslmode.
        assert_eq!(target("postgres://u@h/d?ssl%6Dode=require", &e).unwrap().mode, SslMode::Require);
        assert_eq!(
            target("postgres://u@h/d?sslmode=verify-full&sslmode=disable", &e).unwrap().mode,
            SslMode::Disable
        );
        assert!(target("postgres://u@h/d?sslrootcert=%+1", &e).is_err());
        assert!(target("postgres://u@h/d?sslrootcert=%-1", &e).is_err());
    }

    #[test]
    fn the_system_roots_mean_verify_full() {
        // libpq 16: sslrootcert=system makes verify-full the default and
        // refuses any weaker mode (any public CA signs some name).
        let e = env(&[], None);
        assert_eq!(target("postgres://u@h/d?sslrootcert=system", &e).unwrap().mode, SslMode::VerifyFull);
        let via_env = env(&[("PGSSLROOTCERT", "system")], None);
        assert_eq!(target("postgres://u@h/d", &via_env).unwrap().mode, SslMode::VerifyFull);
        for weak in ["disable", "prefer", "require", "verify-ca"] {
            let err = target(&format!("postgres://u@h/d?sslmode={weak}&sslrootcert=system"), &e).err();
            assert!(err.is_some_and(|e| e.contains("system")), "{weak}");
        }
    }

    #[test]
    fn verify_full_needs_a_host_name_not_only_an_address() {
        // libpq: "host name must be specified for a verified SSL connection";
        // a hostaddr alone names nothing to check the certificate against.
        let t =
            target("postgres://u@/d?hostaddr=10.0.0.5&sslmode=verify-full&sslrootcert=/ca", &env(&[], None));
        assert!(t.is_err_and(|e| e.contains("hostaddr")));
        // With the name given as well, fine.
        let t = target(
            "postgres://u@db/d?hostaddr=10.0.0.5&sslmode=verify-full&sslrootcert=/ca",
            &env(&[], None),
        );
        assert_eq!(t.unwrap().host, "db");
    }

    #[test]
    fn password_file_escapes_are_libpqs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pass");
        // `\*` is a literal star, not "any"; the password ends at the next
        // unescaped `:`.
        std::fs::write(&file, "h:5432:\\*:ann:literal\nh:5432:*:ann:pw:trailing\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = env(&[("PGPASSFILE", file.to_str().unwrap())], None);
        assert_eq!(target("postgres://ann@h/jobs", &e).unwrap().config.get_password(), Some(&b"pw"[..]));
        assert_eq!(target("postgres://ann@h/*", &e).unwrap().config.get_password(), Some(&b"literal"[..]));
    }

    #[test]
    fn verify_modes_need_a_root_certificate() {
        let t = target("postgres://u@h/d?sslmode=verify-full", &env(&[], None)).unwrap();
        let e = connector(&t).err().unwrap();
        assert!(e.contains("sslrootcert"), "{e}");
        let t = target("postgres://u@h/d?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem", &env(&[], None))
            .unwrap();
        assert!(connector(&t).err().unwrap().contains("/nonexistent/ca.pem"));
    }
}
