//! `runws cache warm`: the one writer of a shared cache.

use std::os::unix::process::ExitStatusExt;

use anyhow::Context;

use crate::cache;
use crate::cli::CacheCommand;
use crate::error::Error;

pub fn cache(cmd: CacheCommand) -> anyhow::Result<u8> {
    match cmd {
        CacheCommand::Warm { dir, command } => {
            if !dir.is_dir() {
                return Err(Error::Usage(format!("cache `{}` is not a directory", dir.display())).into());
            }
            let _lock = cache::lock(&dir, true)?;
            let status = std::process::Command::new(&command[0])
                .args(&command[1..])
                .current_dir(&dir)
                .env("RUNWS_CACHE_DIR", &dir)
                .status();
            let status = match status {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::CommandNotFound(command[0].to_string_lossy().into_owned()).into());
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot run `{}`", command[0].to_string_lossy()));
                }
            };
            Ok(crate::sys::proc::Termination::from_raw(status.into_raw()).exit_code())
        }
    }
}
