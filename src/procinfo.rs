//! What runws reads about processes from `/proc`: start times (so a reused
//! pid is never mistaken for the process that was recorded), parents, groups.

/// Fields of `/proc/<pid>/stat` that runws uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// One letter: R, S, D, Z (zombie), T, ...
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    /// Clock ticks after boot at which the process started (field 22).
    pub start_time: u64,
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&read_stat(&pid.to_string())?)
}

/// Brackets the creation of a child by the clock the kernel stamps it with
/// (the boot-time clock, read in clock ticks as `/proc/<pid>/stat` shows
/// it), to learn the child's start time without reading `/proc`.
pub struct Bracket {
    before: std::time::Duration,
}

fn boot_clock() -> Option<std::time::Duration> {
    let mut t = nix::libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec it is given.
    if unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_BOOTTIME, &mut t) } != 0 {
        return None;
    }
    Some(std::time::Duration::new(u64::try_from(t.tv_sec).ok()?, u32::try_from(t.tv_nsec).ok()?))
}

impl Bracket {
    /// Call just before creating the child.
    pub fn open() -> Bracket {
        Bracket { before: boot_clock().unwrap_or_default() }
    }

    /// Call just after: the child's start time when the whole bracket lies
    /// within one clock tick (it spans microseconds, a tick is usually
    /// 10 ms), so that tick is the one the kernel recorded; `None` when it
    /// straddles two, and the caller reads [`stat`] instead.
    pub fn start_time(&self) -> Option<u64> {
        let after = boot_clock()?;
        // SAFETY: sysconf only reads a value glibc already holds.
        let per_second = u128::try_from(unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) }).ok()?;
        let tick = 1_000_000_000u128.checked_div(per_second)?;
        let (a, b) = (self.before.as_nanos() / tick, after.as_nanos() / tick);
        (self.before > std::time::Duration::ZERO && a == b).then_some(a as u64)
    }
}

/// Where this process's argument and environment strings lie in its memory
/// (what /proc/self/cmdline and /proc/self/environ show), as the kernel
/// records them: `((arg_start, arg_end), (env_start, env_end))`.
pub fn own_arg_and_env_ranges() -> Option<((usize, usize), (usize, usize))> {
    let text = read_stat("self")?;
    let f = fields(&text)?;
    // Fields 48 to 51; `fields` starts at field 3.
    let at = |n: usize| f.get(n - 3)?.parse::<usize>().ok();
    Some(((at(48)?, at(49)?), (at(50)?, at(51)?)))
}

/// /proc/WHICH/stat in one read of a buffer that holds any stat line (procfs
/// gives a line in one piece; the standard reader grows its buffer over six
/// reads).
fn read_stat(which: &str) -> Option<String> {
    let mut file = std::fs::File::open(format!("/proc/{which}/stat")).ok()?;
    let mut buf = [0u8; 2048];
    let mut len = 0;
    loop {
        match std::io::Read::read(&mut file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        if len == buf.len() {
            return None;
        }
    }
    String::from_utf8(buf[..len].to_vec()).ok()
}

/// The fields of a stat line from field 3 (state) on. The command name
/// (field 2) is in parentheses and may hold spaces or parentheses itself:
/// everything after the last `)` is plain fields.
fn fields(text: &str) -> Option<Vec<&str>> {
    Some(text[text.rfind(')')? + 1..].split_whitespace().collect())
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    let fields = fields(text)?;
    // fields[0] is field 3 (state): ppid is field 4, pgrp 5, starttime 22.
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// True when `pid` is alive (not a zombie waiting to be reaped) and is the
/// process that started at `start_time`.
pub fn is_same_process(pid: i32, start_time: u64) -> bool {
    pid > 0 && matches!(stat(pid), Some(s) if s.start_time == start_time && !matches!(s.state, 'Z' | 'X'))
}

/// True when the calling process descends from `ancestor` (which must still
/// be the process that started at `start_time`), or belongs to `pgid`.
pub fn caller_belongs_to(ancestor: i32, start_time: u64, pgid: Option<i32>) -> bool {
    pid_belongs_to(std::process::id() as i32, ancestor, start_time, pgid)
}

/// True when process `pid` descends from `ancestor` (which must still be
/// the process that started at `start_time`), or belongs to `pgid`.
pub fn pid_belongs_to(pid: i32, ancestor: i32, start_time: u64, pgid: Option<i32>) -> bool {
    if !is_same_process(ancestor, start_time) {
        return false;
    }
    let mut pid = pid;
    for _ in 0..4096 {
        let Some(s) = stat(pid) else { break };
        if let Some(g) = pgid
            && s.pgid == g
        {
            return true;
        }
        if s.ppid == ancestor {
            return true;
        }
        if s.ppid <= 1 {
            break;
        }
        pid = s.ppid;
    }
    false
}

/// This machine's host name.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_parens() {
        let line = "123 (a) b (c)) S 1 77 77 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, ProcStat { state: 'S', ppid: 1, pgid: 77, start_time: 98765 });
    }

    #[test]
    fn a_bracketed_start_time_is_the_one_proc_shows() {
        let mut known = 0;
        for _ in 0..200 {
            let bracket = Bracket::open();
            let mut child = std::process::Command::new("sleep").arg("1").spawn().unwrap();
            let guess = bracket.start_time();
            let actual = stat(child.id() as i32).unwrap().start_time;
            child.kill().unwrap();
            child.wait().unwrap();
            if let Some(guess) = guess {
                assert_eq!(guess, actual);
                known += 1;
            }
        }
        // Each bracket spans a whole spawn here (an exec, slow on a loaded
        // machine), far more than runws's; most must still be conclusive.
        assert!(known >= 20, "the bracket straddled a tick {} times in 200", 200 - known);
    }

    #[test]
    fn self_is_alive() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert!(is_same_process(me, s.start_time));
        assert!(!is_same_process(me, s.start_time + 1));
    }

    /// The argument range holds exactly this process's arguments, each
    /// ending in a NUL, as /proc/self/cmdline shows them.
    #[test]
    fn own_argument_range_is_the_command_line() {
        let ((arg_start, arg_end), (env_start, env_end)) = own_arg_and_env_ranges().unwrap();
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert_eq!(arg_end - arg_start, cmdline.len());
        assert!(arg_start < arg_end && arg_end <= env_start && env_start < env_end);
    }
}
