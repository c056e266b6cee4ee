//! `runws publish` and `runws lease renew/show` from inside a sandbox: the
//! store is out of the command's reach, so runws performs them over the
//! run's socket, for the run's own lease and fence only. Attacked from
//! inside, as root and as `nobody`, against the file store and PostgreSQL.

use std::path::Path;

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

fn fresh_key(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::now_v7().simple())
}

/// The password in a `postgres://user:password@host/...` URL.
fn password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split_once('@')?.0;
    userinfo.split_once(':').map(|(_, p)| p).filter(|p| !p.is_empty())
}

/// `runws publish KEY - --fence N -v` from outside, with `bytes` on stdin.
fn publish_outside(env: &Env, who: Who, store: &Option<String>, key: &str, fence: u64, bytes: &[u8]) -> Out {
    let fence = fence.to_string();
    let mut c = runws_as(env, who, &["publish", key, "-", "--fence", &fence, "-v"]);
    if let Some(url) = store {
        c.env("RUNWS_STORE", url);
    }
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn_retrying();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    Out::from(child.wait_with_output().unwrap())
}

const SCRIPT: &str = r#"
w="$RUNWS_DIR/work"
printf mine | runws publish "$RUNWS_LEASE_KEY" 2>"$w/pub.err"; echo PUB=$?
printf mine | runws publish "$RUNWS_LEASE_KEY" -v 2>"$w/again.err"; echo AGAIN=$?
printf theirs | runws publish other-key --fence "$RUNWS_FENCE" 2>"$w/other.err"; echo OTHER=$?
printf forged | runws publish "$RUNWS_LEASE_KEY" --fence $((RUNWS_FENCE + 1)) 2>"$w/forged.err"; echo FORGED=$?
printf forged | runws publish "$RUNWS_LEASE_KEY" --fence 1000000 2>"$w/forged2.err"; echo FORGED2=$?
printf old | runws publish "$RUNWS_LEASE_KEY" --fence $((RUNWS_FENCE - 1)) 2>"$w/old.err"; echo OLD=$?
runws lease renew other-key --holder x 2>"$w/renew-other.err"; echo RENEW_OTHER=$?
runws lease show other-key 2>"$w/show-other.err"; echo SHOW_OTHER=$?
runws lease renew "$RUNWS_LEASE_KEY" --holder someone-else 2>"$w/renew-holder.err"; echo RENEW_HOLDER=$?
runws lease acquire other-key 2>"$w/acquire.err"; echo ACQUIRE=$?
runws lease release "$RUNWS_LEASE_KEY" --holder x 2>"$w/release.err"; echo RELEASE=$?
head -c 17000000 /dev/zero | runws publish "$RUNWS_LEASE_KEY" 2>"$w/big.err"; echo BIG=$?
runws lease renew "$RUNWS_LEASE_KEY" --ttl 100d >"$w/renew.out" 2>"$w/renew.err"; echo RENEW=$?
runws lease show "$RUNWS_LEASE_KEY" --json >"$w/show.json" 2>"$w/show.err"; echo SHOW=$?
exp=$(sed -n 's/.*"expires_at": "\(.*\)".*/\1/p' "$w/show.json")
echo LEFT=$(( $(date -d "$exp" +%s) - $(date +%s) ))
env >"$w/env"
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline "$RUNWS_DIR/manifest.json" >"$w/seen" 2>/dev/null
true
"#;

#[test]
fn a_sandboxed_run_publishes_under_its_own_lease_and_nothing_else() {
    for who in everyone() {
        if skip(who, "sandboxed publish") {
            continue;
        }
        for store in stores() {
            let env = Env::new();
            let key = fresh_key("sandboxed");
            let tag = format!("{who:?} {}", if store.is_some() { "postgres" } else { "file" });
            let mut c = runws_as(
                &env,
                who,
                &[
                    "run",
                    "--sandbox",
                    "--net",
                    "none",
                    "--run-id",
                    "s",
                    "--lease",
                    &key,
                    "--lease-ttl",
                    "5s",
                    "--",
                    "sh",
                    "-c",
                    SCRIPT,
                ],
            );
            if let Some(url) = &store {
                c.env("RUNWS_STORE", url);
            }
            let out = Out::from(c.output_retrying());
            out.ok();
            for want in [
                "PUB=0",
                "AGAIN=0",
                "OTHER=3",
                "FORGED=76",
                "FORGED2=76",
                "OLD=76",
                "RENEW_OTHER=3",
                "SHOW_OTHER=3",
                "RENEW_HOLDER=75",
                "ACQUIRE=125",
                "RELEASE=125",
                "BIG=125",
                "RENEW=0",
                "SHOW=0",
            ] {
                assert!(out.stdout.contains(&format!("{want}\n")), "{tag}: want {want}\n{}", out.stdout);
            }
            let work = env.run_dir("s").join("work");
            let read = |name: &str| std::fs::read_to_string(work.join(name)).unwrap_or_default();
            // Each refusal is one line; the calls that worked say nothing.
            for name in [
                "other.err",
                "forged.err",
                "forged2.err",
                "old.err",
                "renew-other.err",
                "show-other.err",
                "renew-holder.err",
                "acquire.err",
                "release.err",
                "big.err",
            ] {
                let err = read(name);
                assert_eq!(err.lines().count(), 1, "{tag}: {name}: {err}");
                assert!(err.starts_with("runws: "), "{tag}: {name}: {err}");
            }
            assert!(read("other.err").contains("is not this run's"), "{tag}: {}", read("other.err"));
            assert!(read("forged.err").contains("not this run's fence"), "{tag}: {}", read("forged.err"));
            assert!(read("big.err").contains("at most"), "{tag}: {}", read("big.err"));
            assert!(read("again.err").contains("unchanged"), "{tag}: {}", read("again.err"));
            for name in ["pub.err", "renew.err", "show.err"] {
                assert_eq!(read(name), "", "{tag}: {name}");
            }
            let show: serde_json::Value = serde_json::from_str(&read("show.json")).unwrap();
            assert_eq!(show["key"], key.as_str());
            let token = show["token"].as_u64().unwrap();
            assert_eq!(read("renew.out").trim(), token.to_string());
            // A renewal from inside lasts at most the run's --lease-ttl.
            let left: i64 =
                out.stdout.split("LEFT=").nth(1).unwrap().lines().next().unwrap().parse().unwrap();
            assert!((0..=6).contains(&left), "{tag}: renewed for {left}s, past the run's 5s");
            // The command is not given the store, nor its password.
            assert!(!read("env").contains("RUNWS_STORE"), "{tag}: {}", read("env"));
            if let Some(pw) = store.as_deref().and_then(password) {
                assert!(!read("seen").contains(pw), "{tag}: the command saw the store's password");
                assert!(
                    !std::fs::read_to_string(env.run_dir("s").join("manifest.json")).unwrap().contains(pw)
                );
            }
            // What landed is the run's own publish, at its own fence: the
            // same bytes again are a no-op, other bytes are refused.
            publish_outside(&env, who, &store, &key, token, b"mine").ok().stderr_has("unchanged");
            publish_outside(&env, who, &store, &key, token, b"forged").code(76);
            if store.is_none() {
                let sink = env.root.join("store/sink");
                let names: Vec<String> = std::fs::read_dir(&sink)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| !n.starts_with('.'))
                    .collect();
                assert_eq!(names, std::slice::from_ref(&key), "{tag}: the sink holds {names:?}");
            }
        }
    }
}

fn have_python() -> bool {
    if Path::new("/usr/bin/python3").exists() {
        return true;
    }
    eprintln!("skipped: /usr/bin/python3 is not installed");
    false
}

/// Speaks the socket's protocol by hand, from inside the run: what the
/// `runws` client would never send.
const PROBE: &str = r#"
import json, os, socket, threading
path = os.environ["RUNWS_DIR"] + "/run/guard.sock"
key = os.environ["RUNWS_LEASE_KEY"]
fence = int(os.environ["RUNWS_FENCE"])

def call(data):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    line = s.makefile("rb").readline()
    s.close()
    return json.loads(line) if line else None

def req(op, body=b"", **kw):
    return json.dumps(dict(op=op, **kw)).encode() + b"\n" + body

out = {
    "garbage": call(b"not json\n"),
    "unknown": call(b'{"op":"format_disk"}\n'),
    "long": call(b"x" * 70000),
    "negative": call(b'{"op":"lease_renew","key":"%s","holder":null,"ttl_ms":-1}\n' % key.encode()),
    "other": call(req("publish", b"x", key="other", fence=fence)),
    "forged": call(req("publish", b"x", key=key, fence=fence + 1)),
    "huge_fence": call(b'{"op":"publish","key":"%s","fence":1e300}\n' % key.encode()),
    "big": call(req("publish", b"\0" * (17 << 20), key=key, fence=fence)),
    "show_other": call(req("lease_show", key="other")),
}
flood = []
def one():
    flood.append(call(req("lease_show", key=key)))
threads = [threading.Thread(target=one) for _ in range(200)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["flood_ok"] = sum(1 for r in flood if r and r.get("ok"))
out["legit"] = call(req("publish", b"legit", key=key, fence=fence))
print(json.dumps(out))
"#;

#[test]
fn the_guard_socket_refuses_malformed_forged_oversized_and_flooding_requests() {
    if !have_python() {
        return;
    }
    for who in everyone() {
        if skip(who, "guard socket abuse") {
            continue;
        }
        let env = Env::new();
        let key = fresh_key("probed");
        let out = Out::from(
            runws_as(
                &env,
                who,
                &[
                    "run",
                    "--sandbox",
                    "--run-id",
                    "p",
                    "--lease",
                    &key,
                    "--",
                    "/usr/bin/python3",
                    "-c",
                    PROBE,
                ],
            )
            .output_retrying(),
        );
        out.ok();
        let v: serde_json::Value =
            serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        let refused = |name: &str, code: u64, says: &str| {
            let r = &v[name];
            assert_eq!(r["ok"], false, "{who:?} {name}: {r}");
            assert_eq!(r["code"], code, "{who:?} {name}: {r}");
            let error = r["error"].as_str().unwrap();
            assert!(error.contains(says), "{who:?} {name}: {error}");
            assert!(!error.contains('\n'), "{who:?} {name}: {error}");
        };
        refused("garbage", 125, "malformed guard request");
        refused("unknown", 125, "malformed guard request");
        refused("long", 125, "longer than 65536 bytes");
        refused("negative", 125, "malformed guard request");
        refused("other", 3, "is not this run's");
        refused("forged", 76, "not this run's fence");
        refused("huge_fence", 125, "malformed guard request");
        refused("big", 125, "at most");
        refused("show_other", 3, "is not this run's");
        assert_eq!(v["flood_ok"], 200, "{who:?}: {v}");
        assert_eq!(v["legit"]["ok"], true, "{who:?}: {v}");
        let token = env.manifest("p")["lease"]["token"].as_u64().unwrap();
        publish_outside(&env, who, &None, &key, token, b"legit").ok().stderr_has("unchanged");
    }
}
