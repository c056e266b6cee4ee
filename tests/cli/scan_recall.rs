//! The secret scan's recall, measured on purpose: every kind of secret the
//! rules know, written in every context real files and transcripts put one
//! in, must be found; the same contexts holding placeholders must not be.
//!
//! Nothing here is a secret literal: every value is assembled at run time
//! from pieces and pseudo-random characters, so this file passes runws's
//! own scan and other scanners'. Set `RUNWS_RECALL_CORPUS` to a directory to
//! keep the generated corpus there (the benchmark reads it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::harness::*;

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const DIGITS: &[u8] = b"0123456789";

/// Deterministic pseudo-random text (xorshift), different per seed.
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

/// How a rule's secrets are written into a context.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A token with a recognisable format: found wherever it stands.
    Token,
    /// A value found only by the name it is assigned to.
    Named,
    /// A value found by its name or as an `Authorization` header's credential.
    Generic,
}

/// A rule, the names a secret of its kind is stored under, a real-looking
/// secret for a seed, and the placeholders written where one would go.
struct Case {
    rule: &'static str,
    kind: Kind,
    /// camelCase, snake_case and UPPER_CASE forms of the name.
    names: [&'static str; 3],
    secret: fn(u64) -> String,
    placeholders: fn() -> Vec<String>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            rule: "aws-access-key-id",
            kind: Kind::Token,
            names: ["awsAccessKeyId", "aws_access_key_id", "AWS_ACCESS_KEY_ID"],
            secret: |s| j(&["AK", "IA", &rand(s, 16, UPPER32)]),
            placeholders: || {
                vec![
                    j(&["AK", "IA", "IOSFODNN7", "EXAMPLE"]),
                    j(&["AK", "IA", &"X".repeat(16)]),
                    j(&["AK", "IA", &"A".repeat(16)]),
                ]
            },
        },
        Case {
            rule: "aws-secret-access-key",
            kind: Kind::Named,
            names: ["awsSecretAccessKey", "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"],
            secret: |s| rand(s, 40, B64),
            placeholders: || {
                vec![
                    j(&["wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "EXAMPLE", "KEY"]),
                    "x".repeat(40),
                    "${AWS_SECRET_ACCESS_KEY}".into(),
                ]
            },
        },
        Case {
            rule: "github-token",
            kind: Kind::Token,
            names: ["githubToken", "github_token", "GITHUB_TOKEN"],
            secret: |s| {
                let prefix = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"][(s % 5) as usize];
                j(&[&prefix[..2], &prefix[2..], &rand(s, 36, ALNUM)])
            },
            placeholders: || {
                vec![
                    j(&["gh", "p_", &"X".repeat(36)]),
                    j(&["gh", "p_", &"x".repeat(36)]),
                    j(&["gh", "p_", &"0".repeat(36)]),
                    j(&["gh", "p_", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"]),
                    j(&["gh", "p_", "EXAMPLE", &rand(1, 29, ALNUM)]),
                ]
            },
        },
        Case {
            rule: "github-fine-grained-pat",
            kind: Kind::Token,
            names: ["githubPat", "github_pat", "GITHUB_PAT"],
            secret: |s| j(&["github", "_pat_", &rand(s, 22, ALNUM), "_", &rand(s + 1, 59, ALNUM)]),
            placeholders: || vec![j(&["github", "_pat_", &"X".repeat(22), "_", &"X".repeat(59)])],
        },
        Case {
            rule: "gitlab-token",
            kind: Kind::Token,
            names: ["gitlabToken", "gitlab_token", "GITLAB_TOKEN"],
            secret: |s| j(&["gl", "pat-", &rand(s, 20, ALNUM)]),
            placeholders: || {
                vec![j(&["gl", "pat-", &"x".repeat(20)]), j(&["gl", "pat-", "0123456789abcdefghij"])]
            },
        },
        Case {
            rule: "slack-token",
            kind: Kind::Token,
            names: ["slackToken", "slack_token", "SLACK_TOKEN"],
            secret: |s| {
                j(&[
                    "xo",
                    "xb-",
                    &rand(s, 12, DIGITS),
                    "-",
                    &rand(s + 1, 13, DIGITS),
                    "-",
                    &rand(s + 2, 24, ALNUM),
                ])
            },
            placeholders: || vec![j(&["xo", "xb-", "000000000000-0000000000000-", &"X".repeat(24)])],
        },
        Case {
            rule: "slack-webhook",
            kind: Kind::Token,
            names: ["slackWebhook", "slack_webhook", "SLACK_WEBHOOK"],
            secret: |s| {
                let path = j(&[
                    "T",
                    &rand(s, 8, UPPER32),
                    "/B",
                    &rand(s + 1, 8, UPPER32),
                    "/",
                    &rand(s + 2, 24, ALNUM),
                ]);
                j(&["https://hooks.", "slack.com/services/", &path])
            },
            placeholders: || {
                vec![j(&["https://hooks.", "slack.com/services/", "T00000000/B00000000/", &"X".repeat(24)])]
            },
        },
        Case {
            rule: "private-key",
            kind: Kind::Token,
            names: ["privateKey", "private_key", "PRIVATE_KEY"],
            secret: |s| {
                let kind = ["RSA ", "EC ", "OPENSSH ", "", "DSA ", "ENCRYPTED "][(s % 6) as usize];
                j(&["-----BEGIN ", kind, "PRIVATE", " KEY-----"])
            },
            // A key block header has no placeholder form: the header is the evidence.
            placeholders: Vec::new,
        },
        Case {
            rule: "stripe-key",
            kind: Kind::Token,
            names: ["stripeKey", "stripe_key", "STRIPE_KEY"],
            secret: |s| j(&["sk", "_", ["live", "test"][(s % 2) as usize], "_", &rand(s, 24, ALNUM)]),
            placeholders: || {
                vec![j(&["sk", "_live_", &"x".repeat(24)]), j(&["sk", "_test_", &"0".repeat(24)])]
            },
        },
        Case {
            rule: "google-api-key",
            kind: Kind::Token,
            names: ["googleApiKey", "google_api_key", "GOOGLE_API_KEY"],
            secret: |s| j(&["AI", "za", &rand(s, 35, B64URL)]),
            placeholders: || vec![j(&["AI", "za", &"X".repeat(35)])],
        },
        Case {
            rule: "npm-token",
            kind: Kind::Token,
            names: ["npmToken", "npm_token", "NPM_TOKEN"],
            secret: |s| j(&["np", "m_", &rand(s, 36, ALNUM)]),
            placeholders: || vec![j(&["np", "m_", &"X".repeat(36)])],
        },
        Case {
            rule: "pypi-token",
            kind: Kind::Token,
            names: ["pypiToken", "pypi_token", "PYPI_TOKEN"],
            secret: |s| j(&["pypi-", "AgEIcHlwaS5vcmc", &rand(s, 120, B64URL)]),
            placeholders: || vec![j(&["pypi-", "AgEIcHlwaS5vcmc", &"x".repeat(60)])],
        },
        Case {
            rule: "openai-api-key",
            kind: Kind::Token,
            names: ["openaiApiKey", "openai_api_key", "OPENAI_API_KEY"],
            secret: |s| {
                if s % 2 == 0 {
                    j(&["sk-", "proj-", &rand(s, 80, B64URL), "T3Blbk", "FJ", &rand(s + 1, 60, ALNUM)])
                } else {
                    j(&["sk-", &rand(s, 20, ALNUM), "T3Blbk", "FJ", &rand(s + 1, 20, ALNUM)])
                }
            },
            placeholders: || vec![j(&["sk-", "proj-", &"x".repeat(40)])],
        },
        Case {
            rule: "anthropic-api-key",
            kind: Kind::Token,
            names: ["anthropicApiKey", "anthropic_api_key", "ANTHROPIC_API_KEY"],
            secret: |s| j(&["sk-", "ant-", "api03-", &rand(s, 93, B64URL), "AA"]),
            placeholders: || vec![j(&["sk-", "ant-", "api03-", &"x".repeat(95)])],
        },
        Case {
            rule: "jwt",
            kind: Kind::Token,
            names: ["idToken", "id_token", "ID_TOKEN"],
            secret: |s| {
                j(&[
                    "ey",
                    "J",
                    &rand(s, 30, B64URL),
                    ".ey",
                    "J",
                    &rand(s + 1, 60, B64URL),
                    ".",
                    &rand(s + 2, 43, B64URL),
                ])
            },
            placeholders: || {
                vec![j(&["ey", "J", &"x".repeat(30), ".ey", "J", &"x".repeat(40), ".", &"x".repeat(20)])]
            },
        },
        Case {
            rule: "generic-secret",
            kind: Kind::Generic,
            names: ["dbPassword", "db_password", "DB_PASSWORD"],
            // Letters and digits, so the randomness test always passes.
            secret: |s| j(&[&rand(s, 30, ALNUM), "7q"]),
            placeholders: || {
                vec![
                    "${DB_PASSWORD}".into(),
                    "$DB_PASSWORD".into(),
                    "{{ db_password }}".into(),
                    "<your-password>".into(),
                    "changeme-changeme-42".into(),
                    "your_password_here_123".into(),
                    "xxxxxxxxxxxxxxxxxxxx1a".into(),
                    "aaaaaaaaaaaaaaaaaaaaaa".into(),
                    "abcdefghijklmnopqrstuvwxyz".into(),
                    "REDACTED-0123456789abc".into(),
                ]
            },
        },
    ]
}

/// Where a context can hold a secret.
#[derive(Clone, Copy, PartialEq)]
enum Needs {
    /// Anywhere: a token is recognised without a name.
    Nothing,
    /// The name and the value on one line: assignment rules can find it.
    Name,
    /// The name and the value on different lines: only a token is found.
    Token,
    /// An `Authorization` header: a token, or any credential-looking value.
    Header,
}

/// `(context, what it needs, text)`: `{c}`, `{s}` and `{u}` are the camel,
/// snake and upper-case names, `{v}` the secret.
const CONTEXTS: &[(&str, Needs, &str)] = &[
    // Configuration files.
    ("ini-quoted", Needs::Name, "{c}=\"{v}\""),
    ("ini-quoted-spaced", Needs::Name, "{c} = \"{v}\""),
    ("ini-bare", Needs::Name, "{c}={v}"),
    ("ini-bare-spaced", Needs::Name, "{s} = {v}"),
    ("env-file", Needs::Name, "{u}={v}"),
    ("toml-section", Needs::Name, "[auth]\n{s} = '{v}'"),
    ("properties-colon", Needs::Name, "{s}: {v}"),
    ("json", Needs::Name, "{\n    \"{s}\": \"{v}\"\n}"),
    ("json-compact", Needs::Name, "{\"{c}\":\"{v}\",\"n\":1}"),
    ("json-escaped", Needs::Name, "\"{\\n  \\\"{s}\\\": \\\"{v}\\\"\\n}\""),
    ("json-escaped-compact", Needs::Name, "{\"body\":\"{\\\"{c}\\\":\\\"{v}\\\"}\"}"),
    ("json-key-value", Needs::Token, "{\"name\": \"{s}\", \"value\": \"{v}\"}"),
    ("xml-element", Needs::Name, "<{c}>{v}</{c}>"),
    ("xml-element-multiline", Needs::Token, "<{c}>\n    {v}\n</{c}>"),
    ("xml-attribute", Needs::Name, "<add key=\"{c}\" value=\"{v}\" />"),
    ("xml-entity-quoted", Needs::Nothing, "<arg>--token=&quot;{v}&quot;</arg>"),
    ("yaml-plain", Needs::Name, "{s}: {v}"),
    ("yaml-single", Needs::Name, "{s}: '{v}'"),
    ("yaml-double", Needs::Name, "{s}: \"{v}\""),
    ("yaml-nested", Needs::Name, "auth:\n  {s}: {v}\n  user: ci"),
    ("yaml-list", Needs::Nothing, "args:\n  - --flag\n  - {v}"),
    ("yaml-literal", Needs::Token, "{s}: |\n  {v}"),
    ("yaml-folded", Needs::Token, "{s}: >\n  {v}"),
    // Code.
    ("csharp", Needs::Name, "string {c} = \"{v}\";"),
    ("go-var", Needs::Name, "var {c} string = \"{v}\""),
    ("go-short", Needs::Name, "{c} := \"{v}\""),
    ("go-backticks", Needs::Name, "{c} := `{v}`"),
    ("java", Needs::Name, "private static final String {u} = \"{v}\";"),
    ("kotlin-typed", Needs::Name, "val {c}: String = \"{v}\""),
    ("kotlin", Needs::Name, "var {c} = \"{v}\""),
    ("php-concat", Needs::Name, "${c} .= \"{v}\";"),
    ("php-array", Needs::Name, "'{s}' => '{v}',"),
    ("python-single", Needs::Name, "{s} = '{v}'"),
    ("python-double", Needs::Name, "{s} = \"{v}\""),
    ("python-kwarg", Needs::Name, "client = Client({s}=\"{v}\")"),
    ("python-dict", Needs::Name, "cfg = {'{s}': '{v}'}"),
    ("ruby-symbol", Needs::Name, "config = { {s}: \"{v}\" }"),
    ("js-const", Needs::Name, "const {c} = \"{v}\";"),
    ("js-template", Needs::Name, "const {c} = `{v}`;"),
    ("js-object", Needs::Name, "  {c}: '{v}',"),
    ("rust-let", Needs::Name, "let {s} = \"{v}\";"),
    ("shell-export", Needs::Name, "export {u}={v}"),
    ("shell-export-quoted", Needs::Name, "export {u}=\"{v}\""),
    ("shell-inline", Needs::Name, "{u}='{v}' ./deploy.sh"),
    ("powershell", Needs::Name, "$env:{u} = \"{v}\""),
    ("dockerfile", Needs::Name, "ENV {u}={v}"),
    ("docker-run", Needs::Name, "docker run -e {u}={v} app"),
    ("cli-flag", Needs::Nothing, "deploy --token {v} --verbose"),
    ("sql-insert", Needs::Nothing, "INSERT INTO keys VALUES (1, '{v}');"),
    ("logstash", Needs::Name, "  \"{c}\" => \"{v}\""),
    // Makefiles.
    ("make-recursive", Needs::Name, "{u} = \"{v}\""),
    ("make-simple", Needs::Name, "{u} := \"{v}\""),
    ("make-shell", Needs::Name, "{u} ::= \"{v}\""),
    ("make-evaluated", Needs::Name, "{u} :::= \"{v}\""),
    ("make-conditional", Needs::Name, "{u} ?= \"{v}\""),
    ("make-append", Needs::Name, "{u} += \"{v}\""),
    // Tables and comments.
    ("csv", Needs::Name, "{c},{v},"),
    ("csv-quoted", Needs::Name, "\"{c}\",\"{v}\""),
    ("tsv", Needs::Nothing, "prod\t{v}\t2024-01-01"),
    ("markdown-code", Needs::Nothing, "Use `{v}` for the deploy."),
    ("comment-slash", Needs::Nothing, "// {v} is the token"),
    ("comment-slash-tight", Needs::Nothing, "//{v}"),
    ("comment-block", Needs::Nothing, "/* {v} */"),
    ("comment-hash", Needs::Nothing, "# {v}"),
    ("comment-dash", Needs::Nothing, "-- {v}"),
    ("comment-html", Needs::Nothing, "<!--{v}-->"),
    ("comment-semicolon", Needs::Nothing, ";{v}"),
    // URLs and headers.
    ("url-basic-auth", Needs::Nothing, "https://ci:{v}@git.example.org/repo.git"),
    ("url-user-only", Needs::Nothing, "https://{v}@git.example.org/repo.git"),
    ("url-query", Needs::Name, "https://api.example.org/v1?{s}={v}&page=2"),
    ("url-query-bare", Needs::Nothing, "https://api.example.org/v1?page=2&t={v}"),
    ("url-encoded-quotes", Needs::Nothing, "q=%22{v}%22"),
    ("url-encoded-newline", Needs::Nothing, "body=first%0A{v}%0Alast"),
    ("bearer", Needs::Header, "Authorization: Bearer {v}"),
    ("bearer-lower", Needs::Header, "authorization: bearer {v}"),
    ("curl-header", Needs::Header, "curl -H \"Authorization: Bearer {v}\" https://api.example.org"),
    ("token-header", Needs::Header, "Authorization: token {v}"),
    // Transcripts and logs: JSON Lines and the escapes strings carry.
    (
        "jsonl-env-dump",
        Needs::Name,
        "{\"type\":\"tool_result\",\"content\":\"$ env\\nPATH=/usr/bin\\n{u}={v}\\nHOME=/root\\n\"}",
    ),
    ("jsonl-newline", Needs::Nothing, "{\"role\":\"assistant\",\"content\":\"Here it is:\\n{v}\\nDone.\"}"),
    ("jsonl-tab", Needs::Nothing, "{\"content\":\"key:\\t{v}\"}"),
    ("jsonl-crlf", Needs::Nothing, "{\"content\":\"a\\r\\n{v}\\r\\n\"}"),
    ("jsonl-quote", Needs::Nothing, "{\"cmd\":\"echo \\\"{v}\\\"\"}"),
    ("jsonl-backslash", Needs::Nothing, "{\"path\":\"C:\\\\keys\\\\{v}\"}"),
    ("jsonl-unicode-quote", Needs::Nothing, "{\"s\":\"\\u0022{v}\\u0022\"}"),
    ("jsonl-unicode-newline", Needs::Nothing, "{\"s\":\"\\u000a{v}\"}"),
    ("jsonl-double-escaped", Needs::Nothing, "{\"s\":\"{\\\"log\\\":\\\"x\\\\n{v}\\\"}\"}"),
    ("jsonl-escaped-slashes", Needs::Nothing, "{\"url\":\"{w}\"}"),
    ("jsonl-named", Needs::Name, "{\"input\":{\"{s}\":\"{v}\"}}"),
    ("log-line", Needs::Nothing, "2024-05-01T10:00:00Z INFO using credential {v} for push"),
    ("log-crlf", Needs::Nothing, "{v}\r"),
    ("brackets", Needs::Nothing, "[{v}]({v})"),
    ("single-quotes", Needs::Nothing, "'{v}'"),
];

fn fill(template: &str, names: &[&str; 3], value: &str) -> String {
    template
        .replace("{c}", names[0])
        .replace("{s}", names[1])
        .replace("{u}", names[2])
        .replace("{w}", &value.replace('/', "\\/"))
        .replace("{v}", value)
}

/// Whether a rule of `kind` is expected to find a value in a context.
fn applies(kind: Kind, needs: Needs) -> bool {
    match kind {
        Kind::Token => true,
        Kind::Named => needs == Needs::Name,
        Kind::Generic => needs == Needs::Name || needs == Needs::Header,
    }
}

/// Writes the corpus into `dir`: `found/<rule>/<context>` files each hold
/// one secret; `placeholder/<rule>/<context>.<n>` files hold none.
fn write_corpus(dir: &Path) -> (usize, usize) {
    let (mut samples, mut placeholders) = (0, 0);
    for (n, case) in cases().iter().enumerate() {
        for (i, &(context, needs, template)) in CONTEXTS.iter().enumerate() {
            if !applies(case.kind, needs) {
                continue;
            }
            let secret = (case.secret)(1000 * n as u64 + i as u64 + 1);
            let text = format!("# sample\n{}\nend\n", fill(template, &case.names, &secret));
            let path = dir.join("found").join(case.rule).join(context);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            samples += 1;
            for (k, p) in (case.placeholders)().iter().enumerate() {
                let text = format!("# sample\n{}\nend\n", fill(template, &case.names, p));
                let path = dir.join("placeholder").join(case.rule).join(format!("{context}.{k}"));
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, text).unwrap();
                placeholders += 1;
            }
        }
    }
    (samples, placeholders)
}

#[test]
fn every_secret_kind_is_found_in_every_context_and_no_placeholder_is() {
    let env = Env::new();
    let corpus = env.path("corpus");
    let (samples, placeholders) = write_corpus(&corpus);
    if let Some(keep) = std::env::var_os("RUNWS_RECALL_CORPUS") {
        let keep = Path::new(&keep);
        let _ = std::fs::remove_dir_all(keep);
        write_corpus(keep);
    }
    let out = env.run(&["scan", "--json", corpus.to_str().unwrap()]);
    let findings: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).unwrap_or_default();
    // Found: which rules reported something in each file.
    let mut by_file: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &findings {
        let path = f["path"].as_str().unwrap_or_default();
        let rel = path.strip_prefix(corpus.to_str().unwrap()).unwrap_or(path).trim_start_matches('/');
        by_file.entry(rel.to_string()).or_default().push(f["rule"].as_str().unwrap_or_default().to_string());
    }
    let mut missed = Vec::new();
    for (n, case) in cases().iter().enumerate() {
        for (i, &(context, needs, template)) in CONTEXTS.iter().enumerate() {
            if !applies(case.kind, needs) {
                continue;
            }
            let rel = format!("found/{}/{context}", case.rule);
            if !by_file.get(&rel).is_some_and(|rules| rules.iter().any(|r| r == case.rule)) {
                let secret = (case.secret)(1000 * n as u64 + i as u64 + 1);
                // Shown with the secret's body masked: enough to see the context.
                let shown = fill(template, &case.names, &format!("{}…", &secret[..secret.len().min(6)]));
                missed.push(format!("{rel}: {shown:?} (got {:?})", by_file.get(&rel)));
            }
        }
    }
    let false_positives: Vec<String> = by_file
        .iter()
        .filter(|(path, _)| path.starts_with("placeholder/"))
        .map(|(path, rules)| format!("{path}: {rules:?}"))
        .collect();
    assert!(
        missed.is_empty() && false_positives.is_empty(),
        "recall {}/{samples}, placeholders reported {}/{placeholders}\nmissed:\n  {}\nplaceholders reported:\n  {}",
        samples - missed.len(),
        false_positives.len(),
        missed.join("\n  "),
        false_positives.join("\n  "),
    );
    out.code(82);
}

#[test]
fn the_repository_passes_its_own_scan() {
    let env = Env::new();
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths: Vec<String> =
        ["src", "tests", "docs", "examples", "ci", "README.md", "BENCHMARKS.md", "Cargo.toml"]
            .iter()
            .map(|p| top.join(p))
            .filter(|p| p.exists())
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
    // The benchmark scripts, not the corpora a benchmark may be writing.
    for e in std::fs::read_dir(top.join("bench")).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            paths.push(e.path().to_string_lossy().into_owned());
        }
    }
    let args: Vec<&str> = std::iter::once("scan").chain(paths.iter().map(String::as_str)).collect();
    env.run(&args).ok();
}
