//! The PostgreSQL store over TLS, against the real server `ci/postgres.sh`
//! starts with `ssl = on` and a certificate for `localhost` made when the
//! cluster was made: every `sslmode`, a wrong CA, a wrong host name, a
//! database the server accepts over TLS only, libpq's variables and
//! password file, and errors that name their cause (never the password).

use std::os::unix::fs::PermissionsExt;

use crate::harness::*;

/// The server's TLS settings from the test environment, or `None` (after
/// saying so) when no server was started; a failure when one should have been.
struct Server {
    port: String,
    ca: String,
    other_ca: String,
    tls_only: String,
}

const USER: &str = "runws";

fn server() -> Option<Server> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("RUNWS_TEST_PG_PORT"),
        get("RUNWS_TEST_PG_CA"),
        get("RUNWS_TEST_PG_OTHER_CA"),
        get("RUNWS_TEST_PG_TLS_ONLY_DB"),
    ) {
        _ if !cfg!(feature = "postgres") => None,
        (Some(port), Some(ca), Some(other_ca), Some(tls_only)) => {
            Some(Server { port, ca, other_ca, tls_only })
        }
        _ if std::env::var_os("RUNWS_TEST_PG_REQUIRED").is_some_and(|v| !v.is_empty()) => {
            panic!(
                "RUNWS_TEST_PG_REQUIRED is set, but the server's TLS settings (RUNWS_TEST_PG_CA, ...) are not"
            )
        }
        _ => {
            eprintln!("skipped: no PostgreSQL server with TLS named (RUNWS_TEST_PG_CA)");
            None
        }
    }
}

/// The test server's password, from the URL the tests are given.
fn password() -> String {
    let url = std::env::var("RUNWS_TEST_PG_URL").unwrap();
    let after = url.split_once("://").unwrap().1;
    let userinfo = after.split_once('@').unwrap().0;
    userinfo.split_once(':').unwrap().1.to_string()
}

fn lease_show(env: &Env, store: &str) -> Out {
    env.run(&["--store", store, "lease", "show", "tls-key"])
}

#[test]
fn verify_full_checks_the_ca_and_the_host_name() {
    let Some(s) = server() else { return };
    let env = Env::new();
    let pw = password();
    let url = |host: &str, db: &str, q: &str| format!("postgres://{USER}:{pw}@{host}:{}/{db}?{q}", s.port);
    // The right CA and the name the certificate holds.
    lease_show(&env, &url("localhost", "runws_test", &format!("sslmode=verify-full&sslrootcert={}", s.ca)))
        .ok();
    // Another CA: refused, naming the file.
    lease_show(
        &env,
        &url("localhost", "runws_test", &format!("sslmode=verify-full&sslrootcert={}", s.other_ca)),
    )
    .code(125)
    .one_line_error()
    .stderr_has("certificate verify failed")
    .stderr_has(&s.other_ca);
    // A name the certificate does not hold: refused by verify-full, not by
    // verify-ca, which checks the chain only.
    lease_show(&env, &url("127.0.0.1", "runws_test", &format!("sslmode=verify-full&sslrootcert={}", s.ca)))
        .code(125)
        .stderr_has("not valid for host `127.0.0.1`");
    lease_show(&env, &url("127.0.0.1", "runws_test", &format!("sslmode=verify-ca&sslrootcert={}", s.ca)))
        .ok();
    // An address with no host name: verify-full has no name to check the
    // certificate against (the `localhost` one would otherwise pass).
    lease_show(
        &env,
        &format!(
            "postgres://{USER}:{pw}@/runws_test?hostaddr=127.0.0.1&port={}&sslmode=verify-full&sslrootcert={}",
            s.port, s.ca
        ),
    )
    .code(125)
    .one_line_error()
    .stderr_has("hostaddr");
    // libpq's rule: require with a root certificate checks the chain.
    lease_show(&env, &url("localhost", "runws_test", &format!("sslmode=require&sslrootcert={}", s.other_ca)))
        .code(125)
        .stderr_has("certificate verify failed");
    // verify-* without any CA to check against is refused before connecting
    // (HOME has no ~/.postgresql/root.crt).
    lease_show(&env, &url("localhost", "runws_test", "sslmode=verify-full"))
        .code(125)
        .stderr_has("sslrootcert");
    lease_show(&env, &url("localhost", "runws_test", "sslmode=bogus"))
        .code(125)
        .one_line_error()
        .stderr_has("sslmode `bogus`");
}

/// A database the server accepts over TLS only: `prefer` (the default) and
/// `require` reach it, so TLS is in use; `disable` gets the server's own
/// refusal.
#[test]
fn a_tls_only_server_refuses_plaintext_in_its_own_words() {
    let Some(s) = server() else { return };
    let env = Env::new();
    let pw = password();
    let url = |q: &str| format!("postgres://{USER}:{pw}@localhost:{}/{}{q}", s.port, s.tls_only);
    lease_show(&env, &url("")).ok();
    lease_show(&env, &url("?sslmode=require")).ok();
    lease_show(&env, &url("?sslmode=disable"))
        .code(125)
        .one_line_error()
        .stderr_has("the server says:")
        .stderr_has("no encryption");
}

#[test]
fn a_wrong_password_and_a_closed_port_say_so_without_the_password() {
    let Some(s) = server() else { return };
    let env = Env::new();
    let wrong = "not-the-password-7d1c";
    let out = lease_show(&env, &format!("postgres://{USER}:{wrong}@localhost:{}/runws_test", s.port));
    out.code(125).one_line_error().stderr_has("password authentication failed");
    assert!(!out.stderr.contains(wrong), "the password was printed: {}", out.stderr);
    // A password with an unescaped `/` (base64 has them): not shown either.
    let slashed = "not/the-password+7d1c==";
    let out = lease_show(&env, &format!("postgres://{USER}:{slashed}@localhost:{}/runws_test", s.port));
    out.code(125).one_line_error();
    assert!(!out.stderr.contains("the-password"), "the password was printed: {}", out.stderr);
    // A port nobody listens on: the system's own error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    lease_show(&env, &format!("postgres://{USER}:{wrong}@127.0.0.1:{closed}/runws_test"))
        .code(125)
        .one_line_error()
        .stderr_has("Connection refused");
}

/// `postgres://` alone, completed from libpq's variables and password file
/// as psql completes it.
#[test]
fn libpq_variables_and_the_password_file_complete_the_url() {
    let Some(s) = server() else { return };
    let env = Env::new();
    let pw = password();
    let with_env = |extra: &[(&str, &str)]| {
        let mut c = env.cmd(&["--store", "postgres://", "lease", "show", "tls-key"]);
        c.env("PGHOST", "localhost")
            .env("PGPORT", &s.port)
            .env("PGUSER", USER)
            .env("PGDATABASE", "runws_test");
        c.env("PGSSLMODE", "verify-full").env("PGSSLROOTCERT", &s.ca);
        for (k, v) in extra {
            c.env(k, v);
        }
        Out::from(c.output().unwrap())
    };
    with_env(&[("PGPASSWORD", &pw)]).ok();
    // From ~/.pgpass, which must be private to be read.
    let pgpass = env.home.join(".pgpass");
    std::fs::write(&pgpass, format!("otherhost:*:*:*:nope\nlocalhost:{}:runws_test:{USER}:{pw}\n", s.port))
        .unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    with_env(&[]).ok();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    with_env(&[]).code(125).stderr_has("group or world access");
    // A wrong password from the file says where it came from.
    std::fs::write(&pgpass, format!("*:*:*:*:wrong-{}\n", std::process::id())).unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    with_env(&[]).code(125).stderr_has("password authentication failed").stderr_has(".pgpass");
}
