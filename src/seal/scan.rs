//! The offline secret scan a seal runs before it archives a run.
//!
//! An archive outlives the run and travels further than its workspace did, so
//! a credential a command printed into a log or left in an output must be
//! caught before the seal, not found later in a copy. This module finds the
//! well-known token formats and secret-looking assignments in arbitrary
//! bytes, offline, and reports where they are without ever repeating them.
//!
//! # Guarantees
//! - A [`Finding`] names `path:line:rule` and carries a redaction that keeps
//!   at most the first four characters of the secret (the public prefix of a
//!   token format, such as `ghp_…`) or none at all (`****`) for values found
//!   only by their name; the secret itself is never stored or printed.
//! - Findings do not depend on how a file is cut into chunks:
//!   [`FileScan::feed`] with any chunking gives exactly what a scan of the
//!   whole file gives, including for a secret split across two chunks.
//! - Memory stays bounded on any input: a line longer than 64 KiB (minified
//!   code, binary data) is scanned in 64 KiB windows that overlap by 4 KiB,
//!   cut at fixed offsets from the line start. A match up to 4 KiB long is
//!   found once whatever the cuts; longer ones may be missed on such lines.
//! - Files are bytes, not text: binary and non-UTF-8 data is scanned as is.
//! - The common case is cheap: one Aho-Corasick pass over the data finds the
//!   rules' keywords and a rule's regex runs only on lines (or windows) where
//!   one of its keywords occurs.
//!
//! # Rules
//! - `aws-access-key-id`: `AKIA` or `ASIA` and 16 base32 characters.
//! - `aws-secret-access-key`: exactly 40 base64 characters assigned to a name
//!   like `aws_secret_access_key` or `SecretAccessKey`; must also pass the
//!   randomness test below.
//! - `github-token`: `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` and 36 or more
//!   alphanumerics.
//! - `github-fine-grained-pat`: `github_pat_`, 22 alphanumerics, `_`, 59 more.
//! - `gitlab-token`: `glpat-` and 20 or more of `[A-Za-z0-9_-]`.
//! - `slack-token`: `xoxa-`, `xoxb-`, `xoxp-`, `xoxo-`, `xoxs-`, `xoxr-`, one
//!   to three numeric fields and an alphanumeric tail.
//! - `slack-webhook`: `hooks.slack.com/services/…` (also `workflows`,
//!   `triggers`).
//! - `private-key`: the line that opens a private key block, `-----BEGIN`,
//!   an optional type (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP …), `PRIVATE
//!   KEY-----` or `PRIVATE KEY BLOCK-----`. The opening line is evidence
//!   enough; the body is not inspected.
//! - `stripe-key`: `sk_live_`, `rk_live_`, and also `sk_test_`, `rk_test_`:
//!   a test-mode key still authenticates as the account and reads its test
//!   data, so it does not belong in an archive either. Publishable keys
//!   (`pk_…`) are public by design and not reported.
//! - `google-api-key`: `AIza` and 35 characters.
//! - `npm-token`: `npm_` and 36 alphanumerics.
//! - `pypi-token`: the `pypi-AgEIcHlwaS5vcmc` macaroon prefix and 50 or more
//!   characters.
//! - `openai-api-key`: `sk-proj-`, `sk-svcacct-`, `sk-admin-` keys, and
//!   legacy `sk-` keys that carry the `T3BlbkFJ` marker.
//! - `anthropic-api-key`: `sk-ant-`, a versioned kind such as `api03`, and
//!   80 or more characters.
//! - `jwt`: three base64url segments, the first starting `eyJ` and the second
//!   `ey` (both JSON objects), with a signature of at least 16 characters.
//! - `generic-secret`: a name containing `password`, `passwd`, `pwd`,
//!   `secret`, `token`, `api_key`, `access_key`, `private_key`, `auth`,
//!   `authorization` or `credential` (any case, any prefix such as
//!   `DB_PASSWORD` or `clientSecret`; a suffix only after `_`, `.`, `-` or, for
//!   a camel-case keyword, a capital: `token_file`, `passwordHash`, but not
//!   `author` or `tokenizer`) assigned with `=`, `:`, `=>`, `:=`, `::=`,
//!   `:::=`, `?=`, `+=` or `.=`, written as an XML element (`<name>value`)
//!   or a CSV pair (`name,value`), perhaps with a type between (`var name
//!   string =`, `val name: String =`, `key="name" value=`), quoted or not and
//!   with quotes escaped or not (`\"name\": \"value\"`), optionally after
//!   `Bearer`/`Basic`, to a value that passes the randomness test. The name
//!   and its value must be on one line.
//!
//! # Where a token may start
//! A token is found where it is not the tail of a longer word: at the start
//! of a line, after a byte that is not a letter, digit or `_`, or right after
//! an escape that ends in one: `\n`, `\t`, `\r`, `\u0022`, `\x22` inside a
//! string, `%0A`, `%22` in a URL. Transcripts and logs are JSON strings, and
//! a token after `\n` is the common case there, not the exception.
//!
//! # Randomness test (assignment rules only)
//! A value followed by `&name=` is a URL query parameter and ends at the `&`.
//! The value is at least [`MIN_ASSIGNED_LEN`](rules::MIN_ASSIGNED_LEN) (16) bytes, its Shannon entropy
//! is above [`MIN_ENTROPY`](rules::MIN_ENTROPY) (3.5 bits per byte), it contains both a letter and
//! a digit, and it is not code or a location: a URL (`://`), a path
//! (`/a/b`, `./a/b`, `~/a/b`), a dotted or `::` path (`settings.api.token2`,
//! `a::b::C`), a name with underscores in one case (`DOT11_AUTH_ALGO`,
//! `session_token_v2`), an identifier at least half made of runs of four or
//! more lower-case letters (`X509EnrollmentAuthFlags`), or a function being
//! called (followed by `(`). Token formats skip this test: their prefix is
//! the evidence, and low-entropy tokens are still tokens.
//!
//! # Placeholders (never findings)
//! A value is a placeholder, and not reported, when it
//! - contains `EXAMPLE` in any case (so `AKIAIOSFODNN7EXAMPLE` and the other
//!   documentation keys), `changeme`, `change_me`, `change-me`, `dummy`,
//!   `placeholder`, `redacted`, `xxxx` (any case) or `****`;
//! - is a template or a variable: starts with `$` (`$VAR`), or contains
//!   `${`, `{{`, `<`, `>` or `%(` (`${VAR}`, `{{ var }}`, `<your-token>`);
//! - contains both `your` and `here` (`your_api_key_here`);
//! - after the token's fixed prefix (and without trailing dashes), is one
//!   character repeated (`ghp_000…`) or a run (`abcdef…`, `123456…`, nine in
//!   ten neighbours one apart). A value assigned to a name is judged the same
//!   way when it starts with a token format's prefix.

mod nested;
mod rules;
mod walk;

#[cfg(test)]
mod tests;

use std::fmt;

use aho_corasick::{AhoCorasick, MatchKind};
use regex::bytes::{CaptureLocations, Regex, RegexBuilder};

pub use nested::{Allowance, DeepScan, LIMITS, Unscanned};
pub use walk::scan_paths;

use rules::{Kind, RULES, TRAITS};

/// The longest stretch of one line handed to the regexes at once.
const WINDOW: usize = 64 * 1024;

/// How much consecutive windows of a long line share: the longest match that
/// is still found wherever the window cuts fall.
const OVERLAP: usize = 4 * 1024;

/// One detection rule. The table is public so the rules can be documented
/// and exported (see [`ripgrep_patterns`]).
#[derive(Debug)]
pub struct Rule {
    pub id: &'static str,
    /// Literals one of which every match contains; a rule's regex only runs
    /// where one occurs.
    pub keywords: &'static [&'static str],
    /// `regex` syntax, compiled with Unicode off (ASCII classes, any byte).
    pub pattern: &'static str,
}

/// A secret found in a file, located and redacted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub path: String,
    /// 1-based; lines end at `\n`.
    pub line: u64,
    pub rule: &'static str,
    /// At most the first four characters of the secret and `…`, or `****`.
    pub redacted: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{} {}", self.path, self.line, self.rule, self.redacted)
    }
}

/// One regex per rule, in the form `rg -f FILE` accepts, so a benchmark can
/// run ripgrep with the same rules (without the keyword gate and the checks
/// against placeholders, which ripgrep cannot express).
pub fn ripgrep_patterns() -> Vec<String> {
    RULES.iter().map(|r| format!("(?-u){}", r.pattern)).collect()
}

/// A keyword of the prefilter and the rules it gates.
#[derive(Debug)]
struct Keyword {
    /// The keyword as written, for the exact comparison case-sensitive rules need.
    text: &'static [u8],
    /// Rules gated whatever the case of the occurrence.
    any_case: u32,
    /// Rules gated only when the occurrence matches `text` exactly.
    exact_case: u32,
}

/// How much of a block is case-folded and searched for keywords at once:
/// small enough to stay in cache, large enough that the restarts are rare.
const PIECE: usize = 64 * 1024;

/// The compiled rules. Build once and share: compiling is the expensive part.
#[derive(Debug)]
pub struct Scanner {
    /// All keywords in lower case, searched for in a lower-cased copy of the
    /// data. Folding the data (a cheap, vectorised pass) instead of asking
    /// the automaton to ignore case keeps its SIMD prefilter, which
    /// case-insensitive automata lose; that is most of the scan's speed.
    keywords: AhoCorasick,
    keyword_rules: Vec<Keyword>,
    longest_keyword: usize,
    regexes: Vec<Regex>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new()
    }
}

impl Scanner {
    pub fn new() -> Scanner {
        let mut keyword_rules: Vec<Keyword> = Vec::new();
        for (i, (rule, &(_, any_case))) in RULES.iter().zip(TRAITS.iter()).enumerate() {
            for kw in rule.keywords {
                let bit = 1u32 << i;
                let slot = match keyword_rules.iter().position(|k| k.text.eq_ignore_ascii_case(kw.as_bytes()))
                {
                    Some(at) => &mut keyword_rules[at],
                    None => {
                        keyword_rules.push(Keyword { text: kw.as_bytes(), any_case: 0, exact_case: 0 });
                        let last = keyword_rules.len() - 1;
                        &mut keyword_rules[last]
                    }
                };
                if any_case {
                    slot.any_case |= bit;
                } else {
                    slot.exact_case |= bit;
                }
            }
        }
        let longest_keyword = keyword_rules.iter().map(|k| k.text.len()).max().unwrap_or(1);
        // The rule table is fixed at compile time and the tests build it, so
        // a failure here is a defect in the table, not a run-time condition.
        let keywords = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .build(keyword_rules.iter().map(|k| k.text.to_ascii_lowercase()))
            .expect("the keyword table builds");
        let regexes = RULES
            .iter()
            .map(|r| {
                RegexBuilder::new(r.pattern)
                    .unicode(false)
                    .build()
                    .unwrap_or_else(|e| panic!("rule `{}` does not compile: {e}", r.id))
            })
            .collect();
        Scanner { keywords, keyword_rules, longest_keyword, regexes }
    }

    /// The rule table, in the order rules are tried.
    pub fn rules() -> &'static [Rule] {
        &RULES
    }

    /// Starts a streaming scan of one file, reported under `rel_path`.
    pub fn file(&self, rel_path: &str) -> FileScan<'_> {
        FileScan {
            scanner: self,
            sink: Sink {
                path: rel_path.to_string(),
                findings: Vec::new(),
                locs: Vec::new(),
                spans: Vec::new(),
            },
            fold: Vec::new(),
            carry: Vec::new(),
            seen: 0,
            line: 1,
        }
    }

    /// Scans a whole file held in memory.
    #[cfg(test)]
    pub fn scan_bytes(&self, rel_path: &str, data: &[u8]) -> Vec<Finding> {
        let mut scan = self.file(rel_path);
        scan.feed(data);
        scan.finish()
    }

    /// Calls `hit(start, end, rules)` for every keyword occurrence in `hay`
    /// that gates at least one rule, in order of `start`. Occurrences may
    /// overlap: the search restarts one byte after each start, which finds
    /// them all because no keyword is a prefix of another (a test checks).
    fn for_each_hit(&self, hay: &[u8], fold: &mut Vec<u8>, mut hit: impl FnMut(usize, usize, u32)) {
        let mut piece = 0;
        while piece < hay.len() {
            let piece_end = (piece + PIECE).min(hay.len());
            // Extended so a keyword starting in this piece is seen whole.
            let folded_end = (piece_end + self.longest_keyword - 1).min(hay.len());
            fold.clear();
            fold.extend(hay[piece..folded_end].iter().map(|&b| b.to_ascii_lowercase()));
            let mut at = 0;
            while let Some(m) = self.keywords.find(aho_corasick::Input::new(fold.as_slice()).range(at..)) {
                let (start, end) = (piece + m.start(), piece + m.end());
                if start >= piece_end {
                    break;
                }
                let k = &self.keyword_rules[m.pattern().as_usize()];
                let gated = if hay[start..end] == *k.text { k.any_case | k.exact_case } else { k.any_case };
                if gated != 0 {
                    hit(start, end, gated);
                }
                at = m.start() + 1;
            }
            piece = piece_end;
        }
    }

    /// The rules whose keywords occur in `hay`.
    fn rules_in(&self, hay: &[u8], fold: &mut Vec<u8>) -> u32 {
        let mut mask = 0;
        self.for_each_hit(hay, fold, |_, _, gated| mask |= gated);
        mask
    }

    /// Scans `block`, whole lines each ending in `\n`, the first of which is
    /// line `line`; returns the number of the line after the block.
    fn scan_block(&self, block: &[u8], mut line: u64, fold: &mut Vec<u8>, sink: &mut Sink) -> u64 {
        // `counted` is the start of line `line`; the line under
        // consideration gathers the rules of all its keyword hits before its
        // window is scanned once. Long lines are windowed by `scan_line`,
        // which needs the fold buffer itself, so they are put aside and
        // scanned after the search.
        let mut counted = 0;
        let mut current: Option<(usize, usize, u32)> = None;
        let mut long_lines: Vec<(usize, usize, u64)> = Vec::new();
        let mut skip_until = 0;
        self.for_each_hit(block, fold, |hit_start, hit_end, gated| {
            if hit_start < skip_until {
                return;
            }
            if let Some((_, end, mask)) = current.as_mut()
                && hit_start < *end
            {
                *mask |= gated;
                return;
            }
            if let Some((start, end, mask)) = current.take() {
                self.scan_window(&block[start..end], mask, line, 0, true, sink);
            }
            let start = block[counted..hit_start]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(counted, |i| counted + i + 1);
            line += count_newlines(&block[counted..start]);
            counted = start;
            let end = block[hit_end..].iter().position(|&b| b == b'\n').map_or(block.len(), |i| hit_end + i);
            if end - start > WINDOW {
                long_lines.push((start, end, line));
                skip_until = end;
            } else {
                current = Some((start, end, gated));
            }
        });
        if let Some((start, end, mask)) = current {
            self.scan_window(&block[start..end], mask, line, 0, true, sink);
        }
        let after = line + count_newlines(&block[counted..]);
        for (start, end, line) in long_lines {
            self.scan_line(&block[start..end], line, 0, fold, sink);
        }
        after
    }

    /// Scans the rest of a line (without its `\n`) whose first `seen` bytes
    /// were covered by an earlier window.
    fn scan_line(&self, mut rest: &[u8], line: u64, mut seen: usize, fold: &mut Vec<u8>, sink: &mut Sink) {
        while rest.len() > WINDOW {
            self.scan_cut(&rest[..WINDOW], line, seen, fold, sink);
            rest = &rest[WINDOW - OVERLAP..];
            seen = OVERLAP;
        }
        let mask = self.rules_in(rest, fold);
        if mask != 0 {
            self.scan_window(rest, mask, line, seen, true, sink);
        }
    }

    /// Scans one full window of a line that goes on past it.
    fn scan_cut(&self, window: &[u8], line: u64, seen: usize, fold: &mut Vec<u8>, sink: &mut Sink) {
        let mask = self.rules_in(window, fold);
        if mask != 0 {
            self.scan_window(window, mask, line, seen, false, sink);
        }
    }

    /// Runs the rules in `mask` over `window`, part of line `line`.
    ///
    /// Windows of one line overlap, so each reports only the matches whose
    /// end falls in its own share: at or after `seen` (the part an earlier
    /// window covered) and, unless it is the line's `last` window, before its
    /// own end, where a match may have been cut short; the next window sees
    /// that one whole.
    fn scan_window(&self, window: &[u8], mask: u32, line: u64, seen: usize, last: bool, sink: &mut Sink) {
        sink.spans.clear();
        if sink.locs.is_empty() {
            sink.locs = (0..RULES.len()).map(|_| None).collect();
        }
        let mut rest = mask;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            let re = &self.regexes[i];
            let (kind, _) = TRAITS[i];
            let locs = sink.locs[i].get_or_insert_with(|| re.capture_locations());
            let mut at = 0;
            while at < window.len() {
                let Some(m) = re.captures_read_at(locs, window, at) else {
                    break;
                };
                let (s, e) = locs.get(1).unwrap_or((m.start(), m.end()));
                // The next search starts right after the secret, not after
                // the byte of context a pattern may have taken after it: that
                // byte may be what stands before the next token.
                at = if e > at { e } else { at + 1 };
                if e < seen || (!last && e == window.len()) {
                    continue;
                }
                let secret = &window[s..e];
                if !rules::accept(kind, RULES[i].keywords, secret, window.get(e).copied()) {
                    continue;
                }
                // The generic rule restates what a specific rule already said.
                if kind == Kind::Assigned && sink.spans.iter().any(|&(a, b)| s < b && a < e) {
                    continue;
                }
                sink.spans.push((s, e));
                let redacted = redact(kind, secret);
                // Two secrets of one rule on one line can redact alike; the
                // report would say the same thing twice.
                let same = |f: &&Finding| f.rule == RULES[i].id && f.redacted == redacted;
                if sink.findings.iter().rev().take_while(|f| f.line == line).any(|f| same(&f)) {
                    continue;
                }
                sink.findings.push(Finding { path: sink.path.clone(), line, rule: RULES[i].id, redacted });
            }
        }
    }
}

fn redact(kind: Kind, secret: &[u8]) -> String {
    match kind {
        Kind::Assigned => "****".to_string(),
        Kind::Token | Kind::KeyBlock => {
            let shown = &secret[..secret.len().min(4)];
            format!("{}…", String::from_utf8_lossy(shown))
        }
    }
}

fn count_newlines(data: &[u8]) -> u64 {
    // Every byte of every file passes through here, so it is written for the
    // compiler to vectorise: a byte-wide sum over runs short enough that it
    // cannot overflow.
    data.chunks(255)
        .map(|run| u64::from(run.iter().fold(0u8, |n, &b| n.wrapping_add(u8::from(b == b'\n')))))
        .sum()
}

/// Where findings go, and the scratch space reused across lines so that
/// scanning allocates only when it finds something.
#[derive(Debug)]
struct Sink {
    path: String,
    findings: Vec<Finding>,
    locs: Vec<Option<CaptureLocations>>,
    /// Secrets reported in the current window, to keep the generic rule quiet.
    spans: Vec<(usize, usize)>,
}

/// The streaming scan of one file: feed it the file's bytes in any chunks,
/// then [`FileScan::finish`].
#[derive(Debug)]
pub struct FileScan<'a> {
    scanner: &'a Scanner,
    sink: Sink,
    /// Scratch space for the case-folded copy the keyword search reads.
    fold: Vec<u8>,
    /// The line being read, from the start of its current window.
    carry: Vec<u8>,
    /// How many leading bytes of `carry` an earlier window already covered.
    seen: usize,
    /// The number of the line in `carry`.
    line: u64,
}

impl FileScan<'_> {
    pub fn feed(&mut self, mut chunk: &[u8]) {
        if !self.carry.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                None => {
                    self.push_carry(chunk);
                    return;
                }
                Some(i) => {
                    self.push_carry(&chunk[..i]);
                    self.end_carry_line();
                    chunk = &chunk[i + 1..];
                }
            }
        }
        // Whole lines are scanned where they lie; only the unfinished last
        // line is copied.
        match chunk.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                self.line = self.scanner.scan_block(&chunk[..=i], self.line, &mut self.fold, &mut self.sink);
                self.push_carry(&chunk[i + 1..]);
            }
            None => self.push_carry(chunk),
        }
    }

    pub fn finish(mut self) -> Vec<Finding> {
        if !self.carry.is_empty() {
            self.scanner.scan_line(&self.carry, self.line, self.seen, &mut self.fold, &mut self.sink);
        }
        // Long lines inside a block are scanned after the block's other
        // lines; a stable sort by line restores file order without touching
        // the order within a line.
        self.sink.findings.sort_by_key(|f| f.line);
        self.sink.findings
    }

    /// Appends to the unfinished line, scanning and dropping full windows as
    /// they form so a line without end costs bounded memory.
    fn push_carry(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let take = (WINDOW + 1 - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            // The same cuts `scan_line` makes on a whole line: a window is
            // cut once the line is known to go on past it.
            while self.carry.len() > WINDOW {
                self.scanner.scan_cut(
                    &self.carry[..WINDOW],
                    self.line,
                    self.seen,
                    &mut self.fold,
                    &mut self.sink,
                );
                self.carry.drain(..WINDOW - OVERLAP);
                self.seen = OVERLAP;
            }
        }
    }

    fn end_carry_line(&mut self) {
        self.scanner.scan_line(&self.carry, self.line, self.seen, &mut self.fold, &mut self.sink);
        self.carry.clear();
        self.seen = 0;
        self.line += 1;
    }
}
