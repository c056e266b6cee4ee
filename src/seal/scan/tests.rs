//! Every token here is assembled at run time from pieces and pseudo-random
//! characters, so this file itself passes the scan (see
//! `this_source_is_clean`).

use super::rules::entropy;
use super::*;

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const DIGITS: &[u8] = b"0123456789";

/// Deterministic pseudo-random strings (xorshift), different per seed.
fn rand(seed: u64, len: usize, alphabet: &[u8]) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

fn j(parts: &[&str]) -> String {
    parts.concat()
}

fn scan(text: &str) -> Vec<Finding> {
    Scanner::new().scan_bytes("f", text.as_bytes())
}

fn rules_found(text: &str) -> Vec<&'static str> {
    scan(text).into_iter().map(|f| f.rule).collect()
}

#[track_caller]
fn assert_found(rule: &str, text: &str, secret: &str) {
    let found = scan(text);
    assert!(found.iter().any(|f| f.rule == rule), "{rule} not found in {text:?}: {found:?}");
    for f in &found {
        assert!(!f.redacted.contains(secret) && !f.to_string().contains(secret), "secret leaked: {f}");
        assert!(f.redacted.chars().count() <= 5, "redaction too long: {f}");
    }
}

#[track_caller]
fn assert_not_found(rule: &str, text: &str) {
    let found = scan(text);
    assert!(!found.iter().any(|f| f.rule == rule), "{rule} wrongly found in {text:?}: {found:?}");
}

fn aws_id(seed: u64) -> String {
    j(&["AK", "IA", &rand(seed, 16, UPPER32)])
}
fn github(seed: u64) -> String {
    j(&["gh", "p_", &rand(seed, 36, ALNUM)])
}
fn fine_grained(seed: u64) -> String {
    j(&["github", "_pat_", &rand(seed, 22, ALNUM), "_", &rand(seed + 1, 59, ALNUM)])
}
fn gitlab(seed: u64) -> String {
    j(&["gl", "pat-", &rand(seed, 20, ALNUM)])
}
fn slack(seed: u64) -> String {
    j(&[
        "xo",
        "xb-",
        &rand(seed, 12, DIGITS),
        "-",
        &rand(seed + 1, 13, DIGITS),
        "-",
        &rand(seed + 2, 24, ALNUM),
    ])
}
fn slack_hook(seed: u64) -> String {
    let path = j(&[
        "T",
        &rand(seed, 8, UPPER32),
        "/B",
        &rand(seed + 1, 8, UPPER32),
        "/",
        &rand(seed + 2, 24, ALNUM),
    ]);
    j(&["https://hooks.", "slack.com/services/", &path])
}
fn key_header(kind: &str) -> String {
    j(&["-----BEGIN ", kind, "PRIVATE", " KEY-----"])
}
fn stripe(mode: &str, seed: u64) -> String {
    j(&["sk", "_", mode, "_", &rand(seed, 24, ALNUM)])
}
fn google(seed: u64) -> String {
    j(&["AI", "za", &rand(seed, 35, B64URL)])
}
fn npm(seed: u64) -> String {
    j(&["np", "m_", &rand(seed, 36, ALNUM)])
}
fn pypi(seed: u64) -> String {
    j(&["pypi-", "AgEIcHlwaS5vcmc", &rand(seed, 120, B64URL)])
}
fn openai_project(seed: u64) -> String {
    j(&["sk-", "proj-", &rand(seed, 80, B64URL), "T3Blbk", "FJ", &rand(seed + 1, 60, ALNUM)])
}
fn openai_legacy(seed: u64) -> String {
    j(&["sk-", &rand(seed, 20, ALNUM), "T3Blbk", "FJ", &rand(seed + 1, 20, ALNUM)])
}
fn anthropic(seed: u64) -> String {
    j(&["sk-", "ant-", "api03-", &rand(seed, 93, B64URL), "AA"])
}
fn jwt(seed: u64) -> String {
    j(&[
        "ey",
        "J",
        &rand(seed, 30, B64URL),
        ".ey",
        "J",
        &rand(seed + 1, 60, B64URL),
        ".",
        &rand(seed + 2, 43, B64URL),
    ])
}
fn random_value(seed: u64) -> String {
    // Letters and digits, so the generic rule's mix test always passes.
    j(&[&rand(seed, 22, ALNUM), "7q"])
}

#[test]
fn the_rule_table_is_sound() {
    let scanner = Scanner::new();
    assert_eq!(Scanner::rules().len(), TRAITS.len());
    assert_eq!(scanner.regexes.len(), RULES.len());
    for rule in Scanner::rules() {
        assert!(!rule.keywords.is_empty(), "{} has no keyword", rule.id);
    }
    for (re, rule) in scanner.regexes.iter().zip(RULES.iter()) {
        assert_eq!(re.captures_len(), 2, "{} must have exactly one capture group", rule.id);
    }
    // The keyword search restarts one byte after each hit, which finds every
    // occurrence only if no keyword is a prefix of another.
    let lower: Vec<String> = RULES.iter().flat_map(|r| r.keywords).map(|k| k.to_ascii_lowercase()).collect();
    for a in &lower {
        for b in &lower {
            assert!(a == b || !b.starts_with(a.as_str()), "keyword `{a}` is a prefix of `{b}`");
        }
    }
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Scanner>();
}

#[test]
fn ripgrep_patterns_compile() {
    let patterns = ripgrep_patterns();
    assert_eq!(patterns.len(), RULES.len());
    for p in patterns {
        assert!(regex::bytes::Regex::new(&p).is_ok(), "{p}");
        assert!(!p.contains('\n'), "{p}");
    }
}

#[test]
fn aws_access_key_id() {
    let k = aws_id(1);
    assert_found("aws-access-key-id", &format!("id = {k}\n"), &k);
    assert_found("aws-access-key-id", &format!("\"{}\"", k.replacen("AK", "AS", 1)), &k);
    // The documentation key, a short one, and a lower-case one.
    assert_not_found("aws-access-key-id", &j(&["AKIA", "IOSFODNN7", "EXAMPLE"]));
    assert_not_found("aws-access-key-id", &k[..19]);
    assert_not_found("aws-access-key-id", &k.to_lowercase());
}

#[test]
fn aws_secret_access_key() {
    let v = rand(2, 40, B64);
    for name in ["aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "\"SecretAccessKey\"", "awsSecretKey"] {
        assert_found("aws-secret-access-key", &format!("{name}: {v}\n"), &v);
    }
    assert_eq!(rules_found(&format!("aws_secret_access_key = {v}")), ["aws-secret-access-key"]);
    assert_not_found("aws-secret-access-key", &format!("checksum = {v}"));
    assert_not_found("aws-secret-access-key", &format!("aws_secret_access_key = {v}AB"));
    assert_not_found(
        "aws-secret-access-key",
        &j(&["aws_secret_access_key", "=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "EXAMPLEKEY"]),
    );
}

#[test]
fn github_tokens() {
    for prefix in ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"] {
        let t = j(&[prefix, &rand(3, 36, ALNUM)]);
        assert_found("github-token", &format!("x {t} y"), &t);
    }
    // The example from the issue: patterned but not a placeholder.
    let patterned = j(&["gh", "p_", &"A1b2".repeat(9)]);
    assert_found("github-token", &patterned, &patterned);
    let t = github(4);
    assert_not_found("github-token", &t[..39]);
    assert_not_found("github-token", &j(&["gh", "p_", &"x".repeat(36)]));
    assert_not_found("github-token", &j(&["gh", "p_", &"0".repeat(36)]));
    assert_not_found("github-token", &format!("a{t}"));
}

#[test]
fn github_fine_grained() {
    let t = fine_grained(5);
    assert_found("github-fine-grained-pat", &format!("GH={t}"), &t);
    assert_not_found("github-fine-grained-pat", &t.replacen('_', "", 3));
    assert_not_found("github-fine-grained-pat", &t[..t.len() - 1]);
}

#[test]
fn gitlab_token() {
    let t = gitlab(6);
    assert_found("gitlab-token", &format!("'{t}'"), &t);
    assert_not_found("gitlab-token", &j(&["gl", "pat-", &"x".repeat(20)]));
    assert_not_found("gitlab-token", &t[..20]);
}

#[test]
fn slack_token_and_webhook() {
    let t = slack(7);
    assert_found("slack-token", &format!("SLACK={t}"), &t);
    assert_not_found("slack-token", &j(&["xo", "xb-not-a-real-token"]));
    let h = slack_hook(8);
    assert_found("slack-webhook", &format!("url: {h}"), &h);
    assert_found("slack-webhook", &format!("url: {}", h.to_uppercase().replace("SERVICES", "services")), &h);
    assert_not_found(
        "slack-webhook",
        &j(&["https://hooks.", "slack.com/services/T00000000/B00000000/", &"X".repeat(24)]),
    );
    assert_not_found("slack-webhook", &j(&["https://hooks.", "slack.com/services/"]));
}

#[test]
fn private_keys() {
    for kind in ["RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED ", ""] {
        let text = format!("a\nb\n{}\nMIIEvQIBADANBg\n", key_header(kind));
        let found = scan(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].line, found[0].rule, found[0].redacted.as_str()), (3, "private-key", "----…"));
    }
    let pgp = j(&["-----BEGIN PGP ", "PRIVATE", " KEY BLOCK-----"]);
    assert_found("private-key", &pgp, &pgp);
    assert_not_found("private-key", "-----BEGIN PUBLIC KEY-----\n-----BEGIN CERTIFICATE-----\n");
    assert_not_found("private-key", &j(&["BEGIN RSA ", "PRIVATE", " KEY"]));
}

#[test]
fn stripe_keys() {
    let live = stripe("live", 9);
    assert_found("stripe-key", &format!("STRIPE_KEY={live}"), &live);
    let test = stripe("test", 10);
    assert_found("stripe-key", &test, &test);
    let restricted = live.replacen("sk", "rk", 1);
    assert_found("stripe-key", &restricted, &restricted);
    assert_not_found("stripe-key", &live.replacen("sk", "pk", 1));
    assert_not_found("stripe-key", &live[..20]);
}

#[test]
fn google_api_key() {
    let k = google(11);
    assert_found("google-api-key", &format!("key={k}&q=1"), &k);
    assert_not_found("google-api-key", &k[..38]);
    assert_not_found("google-api-key", &format!("{k}x"));
}

#[test]
fn npm_token() {
    let t = npm(12);
    assert_found("npm-token", &format!("//registry.npmjs.org/:_authToken={t}"), &t);
    assert_not_found("npm-token", "npm_config_registry=https://registry.npmjs.org/");
    assert_not_found("npm-token", &t[..30]);
}

#[test]
fn pypi_token() {
    let t = pypi(13);
    assert_found("pypi-token", &format!("password = {t}"), &t);
    assert_eq!(rules_found(&format!("password = {t}")), ["pypi-token"]);
    assert_not_found("pypi-token", &j(&["pypi-", "AgEIcHlwaS5vcmc", "short"]));
}

#[test]
fn openai_keys() {
    for t in [openai_project(14), openai_legacy(15)] {
        assert_found("openai-api-key", &format!("OPENAI_API_KEY={t}\n"), &t);
    }
    assert_not_found("openai-api-key", &j(&["sk-", "proj-", "short"]));
    // 48 characters without the marker: not a recognisable key.
    assert_not_found("openai-api-key", &j(&["sk-", &rand(16, 48, ALNUM)]));
}

#[test]
fn anthropic_key() {
    let t = anthropic(17);
    assert_found("anthropic-api-key", &format!("ANTHROPIC_API_KEY=\"{t}\""), &t);
    assert_eq!(rules_found(&format!("ANTHROPIC_API_KEY=\"{t}\"")), ["anthropic-api-key"]);
    assert_not_found("anthropic-api-key", &j(&["sk-", "ant-", "api03-", "short"]));
    assert_not_found("anthropic-api-key", &j(&["sk-", "ant-", "api03-", &"x".repeat(95)]));
}

#[test]
fn jwt_tokens() {
    let t = jwt(18);
    assert_found("jwt", &format!("Authorization: Bearer {t}"), &t);
    assert_eq!(rules_found(&format!("Authorization: Bearer {t}")), ["jwt"]);
    let two = t.rsplit_once('.').map_or("", |(a, _)| a).to_string();
    assert_not_found("jwt", &two);
}

#[test]
fn generic_assignments() {
    let v = random_value(19);
    for line in [
        format!("password = \"{v}\""),
        format!("DB_PASSWORD={v}"),
        format!("export GITHUB_TOKEN={v}"),
        format!("\"api_key\": \"{v}\","),
        format!("client_secret => '{v}'"),
        format!("clientSecret: {v}"),
        format!("authToken := \"{v}\""),
        format!("Authorization: Bearer {v}"),
        format!("--access-key={v}"),
        format!("private_key = {v}"),
        format!("  passwd: {v}"),
        format!("passwordHash = {v}"),
        format!("API_TOKEN_2={v}"),
    ] {
        assert_found("generic-secret", &line, &v);
        let f = scan(&line);
        assert_eq!(f[0].redacted, "****");
    }
}

#[test]
fn generic_placeholders_and_near_misses() {
    let v = random_value(20);
    for line in [
        "password = \"changeme-changeme-1\"".to_string(),
        "token = ${GITHUB_TOKEN_2024_ABC}".to_string(),
        "token = $GITHUB_TOKEN_2024_ABC".to_string(),
        "password: {{ vault_db_password_2 }}".to_string(),
        "api_key = <your-api-key-1234567>".to_string(),
        "secret = \"your_secret_key_here_123\"".to_string(),
        "password = \"aaaaaaaaaaaaaaaaaaaaaa\"".to_string(),
        "token = \"abcdefghijklmnopqrstuvwxyz\"".to_string(),
        "password = \"1234567890123456\"".to_string(),
        "password = \"password1password1\"".to_string(),
        "password = \"****************1a\"".to_string(),
        "token = \"xxxxxxxxxxxxxxxx1a\"".to_string(),
        "secret: dummy-secret-value-42".to_string(),
        "api_key: placeholder-value-0042".to_string(),
        "token = generate_new_session_token()".to_string(),
        "token = os.environ.API_TOKEN_V2".to_string(),
        "token_url = https://auth.example.org/oauth2/v1/token".to_string(),
        "PWD=/home/runner/work/project2/src".to_string(),
        format!("author = {v}"),
        format!("tokenizer = {v}"),
        format!("secretary: {v}"),
        format!("note = {v}"),
        format!("password = {}", &v[..15]),
        "pub AuthAlgo: DOT11_AUTH_ALGORITHM_V2,".to_string(),
        "pub const NL80211_AUTHTYPE_MAX: nl80211_auth_type = nl80211_auth_type::NL80211_AUTHTYPE_FILS_SK;"
            .to_string(),
        "let mut tokens = proc_macro2::TokenStream::new();".to_string(),
        "pub Password: super::super::Win32::Foundation::UNICODE_STRING,".to_string(),
        "session_token = refresh_session_token_v2".to_string(),
        "pub const X509AuthNone: X509EnrollmentAuthFlags = 0i32;".to_string(),
        "let tokens = self.0.to_token_stream();".to_string(),
        "token = mk2Tq9Xz7LpR4wBvN3(input)".to_string(),
    ] {
        assert_not_found("generic-secret", &line);
    }
}

#[test]
fn one_finding_per_line_and_rule_when_redactions_agree() {
    let (a, b) = (random_value(23), random_value(24));
    let found = scan(&format!("password={a} secret={b}\n"));
    assert_eq!(lines_rules(&found), [(1, "generic-secret")]);
    let (g1, g2) = (github(25), github(26));
    assert_eq!(lines_rules(&scan(&format!("{g1} {g2}"))), [(1, "github-token")]);
}

#[test]
fn thresholds() {
    assert!(entropy(b"aaaa") < 0.01);
    assert!((entropy(b"abcd") - 2.0).abs() < 1e-9);
    assert!(rules::looks_random(random_value(21).as_bytes()));
    assert!(!rules::looks_random(b"Secret2Secret2Secret2"));
}

#[test]
fn log2_agrees_with_the_c_library() {
    // Every probability a count over a length can give, and a spread of
    // other values across many exponents.
    for n in 1..=600u32 {
        for c in 1..=n {
            let p = f64::from(c) / f64::from(n);
            let (ours, libm) = (super::rules::log2(p), p.log2());
            assert!(
                (ours - libm).abs() <= 4.0 * f64::EPSILON * libm.abs().max(1.0),
                "{p}: {ours} against {libm}"
            );
        }
    }
    let mut x = 1e-300;
    while x < 1e300 {
        let (ours, libm) = (super::rules::log2(x), x.log2());
        assert!(
            (ours - libm).abs() <= 4.0 * f64::EPSILON * libm.abs().max(1.0),
            "{x}: {ours} against {libm}"
        );
        x *= 1.37;
    }
    for k in -60..60 {
        assert_eq!(super::rules::log2(2f64.powi(k)), f64::from(k));
    }
}

#[test]
fn finding_display_never_shows_the_secret() {
    let t = github(22);
    let found = Scanner::new().scan_bytes("out/log.txt", format!("one\ntwo {t}\n").as_bytes());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].to_string(), "out/log.txt:2:github-token ghp_…");
    let json = serde_json::to_string(&found[0]).unwrap_or_default();
    assert!(json.contains("\"line\":2") && !json.contains(&t));
}

/// A text with one token of each format, on known lines.
fn sample() -> (String, Vec<(u64, &'static str)>) {
    let mut text = String::from("# config\n");
    let mut want = Vec::new();
    let lines: Vec<(&str, String)> = vec![
        ("aws-access-key-id", format!("id={}", aws_id(30))),
        ("github-token", format!("  token {}", github(31))),
        ("slack-webhook", slack_hook(32)),
        ("private-key", key_header("RSA ")),
        ("jwt", format!("cookie: {};", jwt(33))),
        ("generic-secret", format!("PASSWORD=\"{}\"", random_value(34))),
        ("anthropic-api-key", anthropic(35)),
    ];
    for (n, (rule, line)) in lines.into_iter().enumerate() {
        want.push((text.bytes().filter(|&b| b == b'\n').count() as u64 + 1, rule));
        text.push_str(&line);
        text.push_str(if n % 2 == 0 { "\n" } else { "\r\nfiller line\n" });
    }
    text.push_str("last line without newline ");
    text.push_str(&npm(36));
    want.push((text.bytes().filter(|&b| b == b'\n').count() as u64 + 1, "npm-token"));
    (text, want)
}

fn lines_rules(found: &[Finding]) -> Vec<(u64, &'static str)> {
    found.iter().map(|f| (f.line, f.rule)).collect()
}

#[test]
fn whole_file_scan_finds_each_format_on_its_line() {
    let (text, want) = sample();
    assert_eq!(lines_rules(&scan(&text)), want);
}

#[test]
fn a_split_anywhere_gives_the_whole_file_findings() {
    let scanner = Scanner::new();
    let (text, _) = sample();
    let bytes = text.as_bytes();
    let whole = scanner.scan_bytes("f", bytes);
    for cut in 0..=bytes.len() {
        let mut s = scanner.file("f");
        s.feed(&bytes[..cut]);
        s.feed(&bytes[cut..]);
        assert_eq!(s.finish(), whole, "split at {cut}");
    }
    let mut s = scanner.file("f");
    for b in bytes {
        s.feed(std::slice::from_ref(b));
    }
    assert_eq!(s.finish(), whole, "byte by byte");
}

#[test]
fn binary_data_with_an_embedded_token() {
    let t = github(40);
    let mut data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    data.retain(|&b| b != b'\n' && !b.is_ascii_alphanumeric());
    data.extend_from_slice(&[0, 0xff, b'\n', 0xc3, 0x28, 0]);
    data.extend_from_slice(t.as_bytes());
    data.extend_from_slice(&[0, 0xfe, 0x80]);
    data.extend((0..100_000u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8 | 0x80));
    let scanner = Scanner::new();
    let found = scanner.scan_bytes("blob.bin", &data);
    assert_eq!(lines_rules(&found), [(2, "github-token")]);
    let mut s = scanner.file("blob.bin");
    for chunk in data.chunks(4093) {
        s.feed(chunk);
    }
    assert_eq!(s.finish(), found);
}

#[test]
fn a_megabyte_line_is_scanned_everywhere_once() {
    let filler = b"lorem ipsum, dolor; ";
    let mut line: Vec<u8> = filler.iter().copied().cycle().take(1 << 20).collect();
    // Tokens at the start, across window cuts (every WINDOW - OVERLAP bytes
    // from the line start), inside an overlap, and at the very end.
    let step = WINDOW - OVERLAP;
    let at = [
        0,
        WINDOW - 20,
        step - 30,
        step + 100,
        2 * step - 3,
        2 * step + OVERLAP - 41,
        5 * step + OVERLAP - 10,
        line.len() - 42,
    ];
    // Eight 40-character tokens whose redactions differ, so each must be
    // reported once.
    let prefixes = ["gh", "gh", "gh", "gh", "gh", "np", "sk", "rk"];
    let rests = ["p_", "o_", "u_", "s_", "r_", "m_", "_live_", "_live_"];
    let mut want = Vec::new();
    for (n, &pos) in at.iter().enumerate() {
        let head = j(&[prefixes[n], rests[n]]);
        let t = j(&[&head, &rand(50 + n as u64, 40 - head.len(), ALNUM)]);
        line[pos] = b' ';
        line[pos + 1..pos + 1 + t.len()].copy_from_slice(t.as_bytes());
        line[pos + 1 + t.len()] = b' ';
        want.push(format!("{}…", &t[..4]));
    }
    line.truncate(line.len() - 1);
    let mut data = b"before\n".to_vec();
    data.extend_from_slice(&line);
    data.extend_from_slice(b"\nafter\n");
    let scanner = Scanner::new();
    let found = scanner.scan_bytes("min.js", &data);
    let mut got: Vec<String> = found.iter().map(|f| f.redacted.clone()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{found:?}");
    assert!(found.iter().all(|f| f.line == 2));
    for chunk_size in [1000, 65_537, 300_000] {
        let mut s = scanner.file("min.js");
        for chunk in data.chunks(chunk_size) {
            s.feed(chunk);
        }
        assert_eq!(s.finish(), found, "chunks of {chunk_size}");
    }
}

#[test]
fn a_line_of_exactly_one_window() {
    let t = github(60);
    let scanner = Scanner::new();
    for len in [WINDOW - 1, WINDOW, WINDOW + 1, 2 * WINDOW - OVERLAP, 2 * WINDOW - OVERLAP + 1] {
        let mut line = vec![b'.'; len];
        line[len - t.len()..].copy_from_slice(t.as_bytes());
        line.push(b'\n');
        let whole = scanner.scan_bytes("f", &line);
        assert_eq!(lines_rules(&whole), [(1, "github-token")], "line of {len}");
        let mut s = scanner.file("f");
        line.chunks(7).for_each(|c| s.feed(c));
        assert_eq!(s.finish(), whole, "line of {len}");
    }
}

#[test]
fn scan_paths_walks_without_following_links() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("outputs/deep")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), github(70)).unwrap();
    std::fs::write(root.join("outputs/deep/b.log"), format!("x\n{}\n", npm(71))).unwrap();
    std::fs::write(root.join("outputs/a.env"), format!("TOKEN={}\n", random_value(72))).unwrap();
    std::fs::write(root.join("clean.txt"), "nothing here\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("outputs/link-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link-file")).unwrap();
    nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    let found = scan_paths(std::slice::from_ref(&root)).unwrap().findings;
    let got: Vec<String> = found
        .iter()
        .map(|f| {
            format!(
                "{}:{}:{}",
                f.path.strip_prefix(&*root.to_string_lossy()).unwrap_or(&f.path),
                f.line,
                f.rule
            )
        })
        .collect();
    assert_eq!(got, ["/outputs/a.env:1:generic-secret", "/outputs/deep/b.log:2:npm-token"]);

    // A file named directly is scanned; a missing path is an error.
    let direct = scan_paths(&[outside.join("secret.txt")]).unwrap().findings;
    assert_eq!(direct.len(), 1);
    assert!(scan_paths(&[tmp.path().join("missing")]).is_err());
    assert!(matches!(scan_paths(&[root.join("fifo")]), Err(crate::error::Error::SpecialFile { .. })));
}

#[test]
fn this_source_is_clean() {
    let scanner = Scanner::new();
    for (name, text) in [
        ("scan.rs", include_str!("../scan.rs")),
        ("rules.rs", include_str!("rules.rs")),
        ("walk.rs", include_str!("walk.rs")),
        ("nested.rs", include_str!("nested.rs")),
        ("tests.rs", include_str!("tests.rs")),
    ] {
        assert_eq!(scanner.scan_bytes(name, text.as_bytes()), [], "{name}");
    }
}

#[test]
fn a_token_right_after_an_escape_is_found() {
    let t = github(80);
    for before in
        ["\\n", "\\t", "\\r", "\\\"", "\\\\", "\\u0022", "\\x22", "%22", "%0A", "&quot;", "`", "\\\\n"]
    {
        assert_found("github-token", &format!("{{\"log\":\"x{before}{t}\"}}"), &t);
    }
    // Still not the tail of a longer word.
    assert_not_found("github-token", &format!("x{t}"));
    assert_not_found("github-token", &format!("_{t}"));
    // Two tokens of one rule, one byte apart, are both seen.
    let (a, b) = (openai_legacy(81), openai_project(82));
    assert_ne!(a[..4], b[..4]);
    assert_eq!(lines_rules(&scan(&format!("{a} {b}"))), [(1, "openai-api-key"), (1, "openai-api-key")]);
}

#[test]
fn assignments_in_more_syntaxes() {
    let v = random_value(83);
    for line in [
        format!("<dbPassword>{v}</dbPassword>"),
        format!("<add key=\"dbPassword\" value=\"{v}\" />"),
        format!("var dbPassword string = \"{v}\""),
        format!("val dbPassword: String = \"{v}\""),
        format!("DB_PASSWORD ?= {v}"),
        format!("DB_PASSWORD ::= {v}"),
        format!("$dbPassword .= \"{v}\";"),
        format!("dbPassword,{v},"),
        format!("{{\\\"db_password\\\": \\\"{v}\\\"}}"),
        format!("dbPassword := `{v}`"),
        format!("https://x.example/?password={v}&page=2"),
    ] {
        assert_found("generic-secret", &line, &v);
    }
    for line in [
        "https://x.example/?password=abcdefghijklmnopqrstuvwxyz&page=2".to_string(),
        j(&["token = ", "gh", "p_", &"x".repeat(36)]),
        format!("tokenizer string = {v}"),
        "runws: secret found: out/a.zip!/b2.tar.gz!gzip!/c9.txt:2:github-token ghp_…".to_string(),
        format!("the password changed: {v}"),
    ] {
        assert_not_found("generic-secret", &line);
    }
}

#[test]
fn a_compressed_file_gives_the_same_findings_however_it_is_fed() {
    use std::io::Write;
    let t = github(90);
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(format!("one\ntwo {t}\n").repeat(3).as_bytes()).unwrap();
    let gz = e.finish().unwrap();
    let scanner = Scanner::new();
    let allowance = Allowance::new(&LIMITS);
    let scan_in = |chunk: usize| {
        let mut s = DeepScan::new(&scanner, &LIMITS, &allowance, "a.gz");
        gz.chunks(chunk).for_each(|c| s.feed(c));
        s.finish()
    };
    let whole = scan_in(gz.len());
    assert_eq!(whole.1, []);
    assert!(whole.0.iter().any(|f| f.path == "a.gz!gzip" && f.line == 2), "{whole:?}");
    for chunk in [1, 7, 262, 263, 264, 1000] {
        assert_eq!(scan_in(chunk), whole, "chunks of {chunk}");
    }
}
