//! The rule table and the checks a regex match must pass to become a finding.
//!
//! Patterns are written for `regex::bytes` with Unicode off, so `\b` and `\s`
//! are ASCII and a class like `[^"]` matches any byte: files may be binary.
//! Every match contains one of its rule's keywords; the keyword prefilter in
//! the parent module relies on that to skip lines without losing matches.
//! Each pattern has exactly one capture group, the secret itself; the rest
//! of a match is context (the name it is assigned to, a boundary byte).

use super::Rule;

/// What may stand right before a token: the start of the line, a byte that
/// is not part of a word, or an escape whose last character is a letter or
/// digit: `\n`, `\t`, `\u0022`, `\x22` in a string, `%0A` or `%22` in a URL.
/// A plain `\b` misses `"…\nghp_…"`: to it, the `n` of the escape and the
/// token are one word. (An escaped backslash followed by a word, `\\nghp_…`
/// in a file, is taken the same way: the price of reading escapes without
/// parsing strings.)
macro_rules! lead {
    () => {
        r"(?:^|[^A-Za-z0-9_]|\\[A-Za-z]|\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}|%[0-9A-Fa-f]{2})"
    };
}

/// An optional quote around a name or value: `"`, `'` or a backtick, itself
/// escaped once or more inside a string (`\"`, `\\\"`).
macro_rules! quote {
    () => {
        r#"(?:\\{0,3}["'`])?"#
    };
}

/// What joins a name to its value: an assignment (`=`, `:`, `=>`, `:=`,
/// make's `::=`, `:::=`, `?=`, `+=`, PHP's `.=`), an XML element's `>` or a
/// CSV comma; or a type between them (`var t string =`, `val t: String =`,
/// an XML attribute's `" value="`) and then an assignment with `=` only, so
/// prose like `secret found: x` is not one. Quotes are allowed around each
/// side.
macro_rules! assign {
    () => {
        concat!(
            quote!(),
            r"(?:[ \t]*:?[ \t]+[A-Za-z][A-Za-z0-9_.]{0,30}",
            quote!(),
            r"\s*(?:=>|:{1,3}=|[?+.]?=)\s*|(?:\s*(?:=>|:{1,3}=|[?+.]?=|:)\s*|>\s*|,))",
            quote!()
        )
    };
}

/// How a rule's matches are vetted and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A token with a fixed, public prefix: the format is the evidence, so
    /// only placeholders are dropped; the redaction shows the prefix.
    Token,
    /// A `-----BEGIN … PRIVATE KEY-----` line: nothing to vet.
    KeyBlock,
    /// A value recognised only by the name it is assigned to: it must also
    /// look random (see [`looks_random`]); nothing of it is shown.
    Assigned,
}

/// Rules are tried in this order and a generic match that overlaps an
/// earlier rule's match on the same line is dropped, so the generic rule
/// stays last.
pub(super) static RULES: [Rule; 16] = [
    // AWS access key id (`AKIA`/`ASIA` and 16 base32 characters)
    Rule {
        id: "aws-access-key-id",
        keywords: &["AKIA", "ASIA"],
        pattern: concat!(lead!(), r"((?:AKIA|ASIA)[A-Z2-7]{16})\b"),
    },
    // AWS secret access key: 40 base64 characters assigned to an AWS-secret name
    Rule {
        id: "aws-secret-access-key",
        keywords: &["secret"],
        // A `/` may be escaped as `\/`, as some JSON writers do.
        pattern: concat!(
            r"(?i:aws[A-Za-z0-9_.-]{0,20}secret[A-Za-z0-9_.-]{0,20}|secret_?access_?key)",
            assign!(),
            r"((?:[A-Za-z0-9+]|\\?/){40})(?:[^A-Za-z0-9/+=]|$)"
        ),
    },
    // GitHub personal, OAuth, user-to-server, server-to-server or refresh token
    Rule {
        id: "github-token",
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        pattern: concat!(lead!(), r"((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,})\b"),
    },
    // GitHub fine-grained personal access token
    Rule {
        id: "github-fine-grained-pat",
        keywords: &["github_pat_"],
        pattern: concat!(lead!(), r"(github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})\b"),
    },
    // GitLab personal access token
    Rule {
        id: "gitlab-token",
        keywords: &["glpat-"],
        pattern: concat!(lead!(), r"(glpat-[A-Za-z0-9_-]{20,})(?:[^A-Za-z0-9_-]|$)"),
    },
    // Slack bot, user, app or refresh token
    Rule {
        id: "slack-token",
        keywords: &["xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-"],
        pattern: concat!(lead!(), r"(xox[abposr]-(?:[0-9]+-){1,3}[A-Za-z0-9]{8,})\b"),
    },
    // Slack incoming webhook or workflow URL
    Rule {
        id: "slack-webhook",
        keywords: &["hooks.slack.com"],
        pattern: r"(?i:hooks\.slack\.com)\\?/(?:services|workflows|triggers)\\?/((?:[A-Za-z0-9+_-]|\\?/){20,})",
    },
    // private key block (RSA, EC, DSA, OPENSSH, PGP, ENCRYPTED or plain PKCS#8)
    Rule {
        id: "private-key",
        keywords: &["PRIVATE KEY"],
        pattern: r"(-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)",
    },
    // Stripe secret or restricted key, live or test mode
    Rule {
        id: "stripe-key",
        keywords: &["sk_live_", "rk_live_", "sk_test_", "rk_test_"],
        pattern: concat!(lead!(), r"((?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,})\b"),
    },
    // Google API key (`AIza` and 35 characters)
    Rule {
        id: "google-api-key",
        keywords: &["AIza"],
        pattern: concat!(lead!(), r"(AIza[A-Za-z0-9_-]{35})(?:[^A-Za-z0-9_-]|--|$)"),
    },
    // npm access token
    Rule { id: "npm-token", keywords: &["npm_"], pattern: concat!(lead!(), r"(npm_[A-Za-z0-9]{36})\b") },
    // PyPI upload token (a macaroon issued by pypi.org)
    Rule {
        id: "pypi-token",
        keywords: &["pypi-AgEIcHlwaS5vcmc"],
        pattern: concat!(lead!(), r"(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,})"),
    },
    // OpenAI API key (project, service account, admin or legacy user key)
    Rule {
        id: "openai-api-key",
        keywords: &["T3BlbkFJ", "sk-proj-", "sk-svcacct-", "sk-admin-"],
        pattern: concat!(
            lead!(),
            r"(sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}))(?:[^A-Za-z0-9_-]|$)"
        ),
    },
    // Anthropic API or admin key
    Rule {
        id: "anthropic-api-key",
        keywords: &["sk-ant-"],
        pattern: concat!(lead!(), r"(sk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{80,})(?:[^A-Za-z0-9_-]|$)"),
    },
    // JSON Web Token (three base64url segments, header and payload JSON objects)
    Rule {
        id: "jwt",
        keywords: &["eyJ"],
        pattern: concat!(lead!(), r"(eyJ[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,})"),
    },
    // a secret-looking name assigned a long, random-looking value
    Rule {
        id: "generic-secret",
        keywords: &[
            "passw",
            "pwd",
            "secret",
            "token",
            "apikey",
            "api_key",
            "api-key",
            "api.key",
            "accesskey",
            "access_key",
            "access-key",
            "access.key",
            "privatekey",
            "private_key",
            "private-key",
            "private.key",
            "auth",
            "credential",
        ],
        // The name may carry any prefix (`DB_PASSWORD`, `githubToken`) but
        // only a separated suffix (`token_file`) or, after a camel-case
        // keyword, a capitalised one (`passwordHash`), so `author`,
        // `tokenizer`, `secretary` and `AUTHTYPE` are not names.
        pattern: concat!(
            r"[A-Za-z0-9_.-]*(?:(?i:passw(?:or)?d|pwd|secret|token|api[_.-]?key|access[_.-]?key|private[_.-]?key|auth|authorization|credential)[sS]?(?:[_.-][A-Za-z0-9_.-]*)?|(?:[Pp]assw(?:or)?d|[Pp]wd|[Ss]ecret|[Tt]oken|[Aa]pi[Kk]ey|[Aa]ccess[Kk]ey|[Pp]rivate[Kk]ey|[Aa]uth|[Aa]uthorization|[Cc]redential)s?[A-Z][A-Za-z0-9_.-]*)",
            assign!(),
            r"(?i:(?:bearer|basic|token)\s+)?([A-Za-z0-9!#$%&*+./:=?@^_|~-]{16,})"
        ),
    },
];

/// Per rule, in the order of [`RULES`]: how its matches are vetted and
/// whether its keywords match regardless of ASCII case.
pub(super) static TRAITS: [(Kind, bool); 16] = [
    (Kind::Token, false),    // aws-access-key-id
    (Kind::Assigned, true),  // aws-secret-access-key
    (Kind::Token, false),    // github-token
    (Kind::Token, false),    // github-fine-grained-pat
    (Kind::Token, false),    // gitlab-token
    (Kind::Token, false),    // slack-token
    (Kind::Token, true),     // slack-webhook
    (Kind::KeyBlock, false), // private-key
    (Kind::Token, false),    // stripe-key
    (Kind::Token, false),    // google-api-key
    (Kind::Token, false),    // npm-token
    (Kind::Token, false),    // pypi-token
    (Kind::Token, false),    // openai-api-key
    (Kind::Token, false),    // anthropic-api-key
    (Kind::Token, false),    // jwt
    (Kind::Assigned, true),  // generic-secret
];

/// Shortest value the assignment rules accept.
pub const MIN_ASSIGNED_LEN: usize = 16;

/// Entropy, in bits per byte, a value must exceed to pass as random for the
/// assignment rules. A 16-character random alphanumeric string scores about
/// 3.7 and English words or identifiers of that length about 3.0 to 3.4.
pub const MIN_ENTROPY: f64 = 3.5;

/// Whether `secret` (matched by a rule of `kind` with `keywords`, and
/// followed by the byte `next`) is worth reporting.
pub(super) fn accept(kind: Kind, keywords: &[&str], secret: &[u8], next: Option<u8>) -> bool {
    match kind {
        Kind::KeyBlock => true,
        // Trailing dashes are punctuation more often than key (`<!--key-->`).
        Kind::Token => !is_placeholder(secret, trim_dashes(body(keywords, secret))),
        // A value right before `(` is a function being called.
        Kind::Assigned => {
            let value = query_value(secret);
            next != Some(b'(')
                && looks_random(value)
                && !is_placeholder(value, body(&token_keywords(), value))
        }
    }
}

fn trim_dashes(body: &[u8]) -> &[u8] {
    let end = body.iter().rposition(|&b| b != b'-').map_or(0, |i| i + 1);
    &body[..end]
}

/// A value followed by `&name=` is a URL query parameter: it ends at the `&`.
fn query_value(v: &[u8]) -> &[u8] {
    let param = |at: usize| {
        let rest = &v[at + 1..];
        let name = rest.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
        name > 0 && rest.get(name) == Some(&b'=')
    };
    match (0..v.len()).find(|&i| v[i] == b'&' && param(i)) {
        Some(i) => &v[..i],
        None => v,
    }
}

/// The fixed prefixes of the token formats: a value assigned to a name that
/// starts with one is judged as that token would be, so `token = ghp_xxx…`
/// is as much a placeholder as `ghp_xxx…` alone.
fn token_keywords() -> Vec<&'static str> {
    RULES
        .iter()
        .zip(TRAITS.iter())
        .filter(|(_, (kind, _))| *kind == Kind::Token)
        .flat_map(|(rule, _)| rule.keywords.iter().copied())
        .collect()
}

/// The part of a token after its fixed prefix, where randomness must be.
fn body<'s>(keywords: &[&str], secret: &'s [u8]) -> &'s [u8] {
    keywords
        .iter()
        .map(|k| k.as_bytes())
        .find(|k| secret.len() >= k.len() && secret[..k.len()].eq_ignore_ascii_case(k))
        .map_or(secret, |k| &secret[k.len()..])
}

/// Words that mark a value as a stand-in, matched regardless of case.
const PLACEHOLDER_WORDS: &[&str] =
    &["example", "changeme", "change_me", "change-me", "dummy", "placeholder", "redacted", "xxxx", "****"];

/// Template syntax that means the value is filled in elsewhere.
const TEMPLATE_MARKS: &[&str] = &["${", "{{", "<", ">", "%("];

/// True for values that stand in for a secret rather than being one: see the
/// module documentation for the list.
pub(super) fn is_placeholder(secret: &[u8], body: &[u8]) -> bool {
    if secret.first() == Some(&b'$') {
        return true;
    }
    if TEMPLATE_MARKS.iter().any(|m| contains(secret, m.as_bytes(), false)) {
        return true;
    }
    if PLACEHOLDER_WORDS.iter().any(|w| contains(secret, w.as_bytes(), true)) {
        return true;
    }
    // `your_token_here`, `YOUR-API-KEY-HERE`
    if contains(secret, b"your", true) && contains(secret, b"here", true) {
        return true;
    }
    all_same(body) || sequential(body)
}

fn contains(hay: &[u8], needle: &[u8], fold_case: bool) -> bool {
    hay.windows(needle.len()).any(|w| if fold_case { w.eq_ignore_ascii_case(needle) } else { w == needle })
}

fn all_same(body: &[u8]) -> bool {
    body.windows(2).all(|w| w[0].eq_ignore_ascii_case(&w[1]))
}

/// `abcdef…`, `123456…`, `zyxw…`: nine in ten neighbours one apart in the
/// same direction (a wrap like `9` to `0` is allowed to break the run).
fn sequential(body: &[u8]) -> bool {
    if body.len() < 8 {
        return false;
    }
    let pairs = body.len() - 1;
    let up = body.windows(2).filter(|w| w[1] == w[0].wrapping_add(1)).count();
    let down = body.windows(2).filter(|w| w[1] == w[0].wrapping_sub(1)).count();
    up.max(down) * 10 >= pairs * 9
}

/// Shannon entropy of `data`, in bits per byte.
pub fn entropy(data: &[u8]) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in data {
        counts[usize::from(b)] += 1;
    }
    let n = data.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * log2(p)
        })
        .sum()
}

/// The base-2 logarithm of a positive, finite, normal `x`, to within a few
/// units in the last place. `f64::log2` would be the C library's, and it
/// is the one function runws would load libm for (another shared library
/// mapped and bound at every start).
pub(super) fn log2(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // x = m * 2^exponent with m in [1, 2), then in [sqrt(1/2), sqrt(2)).
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        exponent += 1;
    }
    // ln(m) = 2 atanh(z), z = (m - 1) / (m + 1), |z| < 0.172: the series
    // z + z^3/3 + z^5/5 + ... has fallen below 1e-17 by its 12th term.
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    let mut term = z;
    let mut sum = 0.0;
    for k in 0..13 {
        sum += term / f64::from(2 * k + 1);
        term *= z2;
    }
    exponent as f64 + 2.0 * sum * std::f64::consts::LOG2_E
}

/// Whether a value found only by its name looks like a credential rather
/// than code, a word, a path or a URL.
pub(super) fn looks_random(v: &[u8]) -> bool {
    if v.len() < MIN_ASSIGNED_LEN || entropy(v) <= MIN_ENTROPY {
        return false;
    }
    // Random strings of this length almost always mix letters and digits;
    // identifiers and prose seldom do, and requiring both is what keeps
    // `generate_new_session_token` from being a finding.
    if !v.iter().any(u8::is_ascii_digit) || !v.iter().any(u8::is_ascii_alphabetic) {
        return false;
    }
    if contains(v, b"://", false) {
        return false;
    }
    let path_like =
        (v.starts_with(b"/") || v.starts_with(b"./") || v.starts_with(b"~/")) && v[1..].contains(&b'/');
    !path_like
        && !dotted_identifier(v)
        && !contains(v, b"::", false)
        && !constant_or_snake_name(v)
        && !wordy(v)
}

/// `X509EnrollmentAuthFlags`, `MI_UserCredentials_0`: an identifier at least
/// half of which is runs of four or more lower-case letters reads as words.
/// About 2 in 100 random 16-character alphanumeric values do too (1 in 2000
/// at 40 characters); the generic rule accepts that miss to stay quiet on
/// type names.
fn wordy(v: &[u8]) -> bool {
    if !v.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
        return false;
    }
    let in_words: usize =
        v.split(|b| !b.is_ascii_lowercase()).filter(|run| run.len() >= 4).map(<[u8]>::len).sum();
    in_words * 2 >= v.len()
}

/// `DOT11_AUTH_ALGORITHM`, `session_token_v2`: an identifier with
/// underscores and letters of one case is a name in code. Random values
/// with underscores (base64url) mix cases.
fn constant_or_snake_name(v: &[u8]) -> bool {
    v.contains(&b'_')
        && v.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && (!v.iter().any(u8::is_ascii_lowercase) || !v.iter().any(u8::is_ascii_uppercase))
}

/// `os.environ.API_TOKEN_V2`, `settings.auth.token2`, `self.0.tokens`:
/// code, not a value.
fn dotted_identifier(v: &[u8]) -> bool {
    let (mut parts, mut names) = (0, 0);
    for part in v.split(|&b| b == b'.') {
        let name = part.first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
            && part.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
        let index = !part.is_empty() && part.iter().all(u8::is_ascii_digit);
        if !name && !index {
            return false;
        }
        parts += 1;
        names += usize::from(name);
    }
    parts > 1 && names > 0
}
