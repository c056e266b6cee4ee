//! The S3 client: object_store's, driven from runws's synchronous code by a
//! single-threaded runtime made when a bucket is first used (a plain
//! `runws run` never starts one).

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut, S3CopyIfNotExists};
use object_store::path::Path as Key;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutPayload, RetryConfig, WriteMultipart,
};
use sha2::{Digest, Sha256};

use super::{S3Place, Stored};
use crate::error::{Error, IoContext, Result};

/// Archives up to this size go in one conditional PUT, read into memory
/// first (object_store sends a body it holds); larger ones in a multipart
/// upload to a staging key, then a create-only server-side copy, which
/// costs the store a second write of the whole (measured against moto:
/// 156 MB took 0.9 s in one PUT, 1.3 s in parts and 1.9 s more to copy).
/// `RUNWS_S3_MULTIPART_FROM` lowers it where memory is short.
const SINGLE_PUT_MAX: u64 = 256 << 20;
const MULTIPART_FROM_ENV: &str = "RUNWS_S3_MULTIPART_FROM";

/// The size from which an archive goes in parts: `RUNWS_S3_MULTIPART_FROM`
/// (a size, at least 5 MiB, S3's smallest part), else 256 MiB.
fn multipart_from() -> Result<u64> {
    multipart_from_value(std::env::var(MULTIPART_FROM_ENV).ok().as_deref())
}

/// [`multipart_from`] for the variable's value. It only lowers the size: an
/// archive read into memory whole is never larger than [`SINGLE_PUT_MAX`].
fn multipart_from_value(v: Option<&str>) -> Result<u64> {
    match v {
        None => Ok(SINGLE_PUT_MAX + 1),
        Some(v) => match crate::duration::parse_size(v) {
            Ok(n) if (5 << 20..=SINGLE_PUT_MAX).contains(&n) => Ok(n),
            _ => Err(Error::Usage(format!(
                "{MULTIPART_FROM_ENV}=`{}` is not a size from 5MiB to 256MiB",
                crate::shown::line(v)
            ))),
        },
    }
}
/// The size of one part of a multipart upload, and how many are in flight.
const PART: usize = 16 << 20;
const PARTS_IN_FLIGHT: usize = 4;
/// One server-side copy (UploadPartCopy) moves at most this much: a larger
/// archive cannot take its real name create-only.
const COPY_MAX: u64 = 5 << 30;
/// Under the place, the hidden segment staging uploads go to.
const STAGING: &str = ".staging";

/// A bucket, opened with the credentials the environment gives.
pub struct Bucket {
    store: AmazonS3,
    rt: tokio::runtime::Runtime,
    bucket: String,
}

impl Bucket {
    pub fn open(place: &S3Place) -> Result<Bucket> {
        // reqwest's TLS uses the process's default provider: the same ring
        // the PostgreSQL store uses (installing twice is harmless).
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Client options first: `with_allow_http` below lives among them.
        let mut b = AmazonS3Builder::from_env().with_bucket_name(&place.bucket).with_client_options(
            // A transfer may take as long as the link needs (a 256 MiB PUT
            // on a slow uplink), but a connection that stops moving for a
            // minute is given up; an hour bounds any one request.
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(3))
                .with_read_timeout(Duration::from_secs(60))
                .with_timeout(Duration::from_secs(3600)),
        );
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let has_env_keys = env("AWS_ACCESS_KEY_ID").is_some() && env("AWS_SECRET_ACCESS_KEY").is_some();
        let profile = super::profile::load()?.unwrap_or_default();
        if !has_env_keys {
            if let (Some(k), Some(s)) = (&profile.access_key_id, &profile.secret_access_key) {
                b = b.with_access_key_id(k).with_secret_access_key(s);
                if let Some(t) = &profile.session_token {
                    b = b.with_token(t);
                }
            } else if env("AWS_WEB_IDENTITY_TOKEN_FILE").is_none()
                && env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_none()
                && env("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_none()
            {
                return Err(Error::Usage(format!(
                    "no AWS credentials for `{}`: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE \
                     (a profile with static keys in ~/.aws/credentials)",
                    place.url()
                )));
            }
        }
        let region = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")).or(profile.region);
        b = b.with_region(region.unwrap_or_else(|| "us-east-1".into()));
        let endpoint =
            env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL")).or(profile.endpoint_url);
        if let Some(e) = &endpoint {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        // Create-only writes: If-None-Match on PUT and on the copy's
        // CompleteMultipartUpload, which AWS S3 and most compatible
        // servers honour.
        b = b
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_copy_if_not_exists(S3CopyIfNotExists::Multipart)
            .with_config(AmazonS3ConfigKey::ImdsV1Fallback, "false")
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(20),
                backoff: Default::default(),
            });
        let store = b.build().map_err(|e| unreachable(place, &e))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Other(format!("cannot start the S3 client: {e}")))?;
        Ok(Bucket { store, rt, bucket: place.bucket.clone() })
    }

    fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    fn key(&self, key: &str) -> Result<Key> {
        Key::parse(key).map_err(|e| Error::Usage(format!("`{}` is not an object key: {e}", self.url(key))))
    }

    fn fail(&self, key: &str, op: &'static str, e: object_store::Error) -> Error {
        Error::Store { store: self.url(key), op, why: explain(&e) }
    }

    /// The object's size, or `None` when there is none.
    pub fn head(&self, key: &str) -> Result<Option<u64>> {
        let k = self.key(key)?;
        match self.rt.block_on(self.store.head(&k)) {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail(key, "look up", e)),
        }
    }

    /// Writes `bytes` as `key`, only when no object has that name.
    pub fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let k = self.key(key)?;
        let put = self.store.put_opts(&k, PutPayload::from(bytes), PutMode::Create.into());
        match self.rt.block_on(put) {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                Err(exists(&self.url(key)))
            }
            Err(e) => Err(self.fail(key, "write", e)),
        }
    }

    /// Uploads the file at `path` as `key`, only when no object has that
    /// name; the object appears whole or not at all.
    pub fn put_file_new(&self, key: &str, path: &Path) -> Result<()> {
        let mut file = File::open(path).ctx("cannot open", path)?;
        let size = file.metadata().ctx("cannot stat", path)?.len();
        if size < multipart_from()? {
            let mut bytes = Vec::with_capacity(size as usize);
            file.read_to_end(&mut bytes).ctx("cannot read", path)?;
            return self.put_new(key, bytes);
        }
        if size > COPY_MAX {
            return Err(Error::Other(format!(
                "the archive is {size} bytes; over 5 GiB it cannot take its name in `{}` create-only",
                self.url(key)
            )));
        }
        if self.head(key)?.is_some() {
            return Err(exists(&self.url(key)));
        }
        let (dir, name) = key.rsplit_once('/').map_or(("", key), |(d, n)| (d, n));
        let staging_key = if dir.is_empty() {
            format!("{STAGING}/{name}.{}", uuid::Uuid::now_v7())
        } else {
            format!("{dir}/{STAGING}/{name}.{}", uuid::Uuid::now_v7())
        };
        let staging = self.key(&staging_key)?;
        let target = self.key(key)?;
        self.rt.block_on(async {
            let upload =
                self.store.put_multipart(&staging).await.map_err(|e| self.fail(&staging_key, "upload", e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
            let mut buf = vec![0u8; PART];
            let mut sent: Result<()> = Ok(());
            loop {
                let n = match read_full(&mut file, &mut buf).ctx("cannot read", path) {
                    Ok(n) => n,
                    Err(e) => {
                        sent = Err(e);
                        break;
                    }
                };
                if n == 0 {
                    break;
                }
                if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    sent = Err(self.fail(&staging_key, "upload", e));
                    break;
                }
                w.write(&buf[..n]);
            }
            // A failed upload is aborted, not left for a lifecycle rule.
            if let Err(e) = sent {
                let _ = w.abort().await;
                return Err(e);
            }
            w.finish().await.map_err(|e| self.fail(&staging_key, "upload", e))?;
            let copied = self.store.copy_if_not_exists(&staging, &target).await;
            let _ = self.store.delete(&staging).await;
            match copied {
                Ok(()) => Ok(()),
                Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                    Err(exists(&self.url(key)))
                }
                Err(e) => Err(self.fail(key, "write", e)),
            }
        })
    }

    /// Removes `key` (a seal taking back what it placed).
    pub fn delete(&self, key: &str) -> Result<()> {
        let k = self.key(key)?;
        self.rt.block_on(self.store.delete(&k)).map_err(|e| self.fail(key, "remove", e))
    }

    /// A small object's bytes, refused past `max`; `None` when absent.
    pub fn get_small(&self, key: &str, max: usize) -> Result<Option<Vec<u8>>> {
        let k = self.key(key)?;
        self.rt.block_on(async {
            let got = match self.store.get(&k).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(self.fail(key, "read", e)),
            };
            let mut out = Vec::new();
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.fail(key, "read", e))?;
                if out.len() + chunk.len() > max {
                    return Err(Error::Other(format!("`{}` is over {max} bytes", self.url(key))));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(Some(out))
        })
    }

    /// Streams `key` into `out` (when given) through a sha256, refusing more
    /// than `max` bytes; returns the digest and the size.
    pub fn get_hashed(&self, key: &str, mut out: Option<&mut File>, max: u64) -> Result<(String, u64)> {
        let k = self.key(key)?;
        self.rt.block_on(async {
            let got = self.store.get(&k).await.map_err(|e| match e {
                object_store::Error::NotFound { .. } => {
                    Error::Usage(format!("no archive `{}`", self.url(key)))
                }
                e => self.fail(key, "read", e),
            })?;
            let mut hasher = Sha256::new();
            let mut bytes = 0u64;
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.fail(key, "read", e))?;
                bytes += chunk.len() as u64;
                if bytes > max {
                    return Err(Error::Other(format!(
                        "`{}` is over {max} bytes, more than the limits allow (raise --max-bytes)",
                        self.url(key)
                    )));
                }
                hasher.update(&chunk);
                if let Some(f) = out.as_mut() {
                    f.write_all(&chunk)
                        .map_err(|e| Error::Other(format!("cannot write the download: {e}")))?;
                }
            }
            Ok((crate::hex::encode(&hasher.finalize()), bytes))
        })
    }

    /// Every object under `prefix/` (all of the bucket for an empty
    /// prefix), staging uploads left out.
    pub fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        let p = if prefix.is_empty() { None } else { Some(self.key(prefix)?) };
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut stream = self.store.list(p.as_ref());
            while let Some(meta) = stream.next().await {
                let meta = meta.map_err(|e| self.fail(prefix, "list", e))?;
                let key = meta.location.to_string();
                if key.split('/').any(|s| s.starts_with('.')) {
                    continue;
                }
                out.push(Stored {
                    url: self.url(&key),
                    bytes: meta.size,
                    modified: meta.last_modified.to_rfc3339(),
                });
            }
            Ok(out)
        })
    }
}

fn exists(url: &str) -> Error {
    Error::Usage(format!("`{url}` already exists; an archive is never overwritten"))
}

fn unreachable(place: &S3Place, e: &object_store::Error) -> Error {
    Error::StoreUnreachable { store: place.url(), why: explain(e) }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One line a person can act on: the store's own error code and message
/// when it sent one, else the deepest cause (connection refused, a name
/// that does not resolve), never a credential.
fn explain(e: &object_store::Error) -> String {
    let full = e.to_string();
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let close = format!("</{t}>");
        let start = full.find(&open)? + open.len();
        let end = full[start..].find(&close)? + start;
        Some(full[start..end].to_string())
    };
    if let (Some(code), Some(message)) = (tag("Code"), tag("Message")) {
        return crate::shown::line(&format!("{code}: {message}"));
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let deepest = cause.to_string();
    let status =
        full.find("status: ").map(|i| full[i + 8..].split([',', ' ', '\n']).next().unwrap_or("").to_string());
    let text = match status {
        Some(s) if !s.is_empty() && !deepest.contains(&s) => format!("{deepest} (HTTP {s})"),
        _ => deepest,
    };
    let mut line = crate::shown::line(&text);
    if line.len() > 300 {
        line.truncate(
            line.char_indices().take_while(|(i, _)| *i < 300).last().map_or(0, |(i, c)| i + c.len_utf8()),
        );
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multipart_size_can_only_be_lowered() {
        assert_eq!(multipart_from_value(None).unwrap(), SINGLE_PUT_MAX + 1);
        assert_eq!(multipart_from_value(Some("32MiB")).unwrap(), 32 << 20);
        assert_eq!(multipart_from_value(Some("256MiB")).unwrap(), SINGLE_PUT_MAX);
        for bad in ["4MiB", "257MiB", "10GiB", "x"] {
            assert!(matches!(multipart_from_value(Some(bad)), Err(Error::Usage(_))), "{bad}");
        }
    }
}
