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
    crate::sys::proc::boot_clock()
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
        let per_second = u128::from(crate::sys::proc::clock_ticks_per_second()?);
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
    // The name in the parentheses is whatever the process executed or set
    // (any bytes): never a reason to lose the line, or the process would
    // vanish from the reaper's sight and outlive the reap of its run.
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
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

/// True when process `pid` descends from `ancestor`, which must still be
/// the process that started at `start_time`. Only descent counts: a
/// process group can be joined by any process of the same session, a
/// parent cannot be chosen. Each step up the chain must lead to a process
/// that started no later than the one below it, so a parent that died and
/// whose pid was reused since is never taken for an ancestor. A process
/// whose parent died was reparented and has lost its descent (runws is a
/// child subreaper, so a command's orphans are reparented to it).
pub fn pid_belongs_to(pid: i32, ancestor: i32, start_time: u64) -> bool {
    if !is_same_process(ancestor, start_time) {
        return false;
    }
    let Some(mut s) = stat(pid) else { return false };
    for _ in 0..4096 {
        if s.ppid == ancestor {
            // runws alive before and after the walk: its pid was not reused.
            return start_time <= s.start_time && is_same_process(ancestor, start_time);
        }
        if s.ppid <= 1 {
            return false;
        }
        let Some(parent) = stat(s.ppid) else { return false };
        if parent.start_time > s.start_time {
            return false;
        }
        s = parent;
    }
    false
}

/// The command name of a stat line (field 2, without its parentheses).
fn comm(text: &str) -> Option<&str> {
    Some(&text[text.find('(')? + 1..text.rfind(')')?])
}

/// `/proc/<pid>/stat` with the process's command name (`comm`).
pub fn stat_and_name(pid: i32) -> Option<(ProcStat, String)> {
    let text = read_stat(&pid.to_string())?;
    Some((parse_stat(&text)?, comm(&text)?.to_string()))
}

/// The command name (`comm`) of this process.
pub fn own_name() -> Option<String> {
    let text = read_stat("self")?;
    Some(comm(&text)?.to_string())
}

/// The real user id of process `pid` (`/proc/<pid>/status`).
pub fn real_uid(pid: i32) -> Option<u32> {
    // Bytes first: its `Name:` line holds the process's name, any bytes.
    let status = crate::fsx::read_kernel_bytes(format!("/proc/{pid}/status")).ok()?;
    let status = String::from_utf8_lossy(&status);
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Clock ticks per second, the unit of [`ProcStat::start_time`].
pub fn ticks_per_second() -> u64 {
    crate::sys::proc::clock_ticks_per_second().filter(|t| *t > 0).unwrap_or(100)
}

/// The boot-clock tick (the unit of [`ProcStat::start_time`]) at which the
/// wall clock showed `t`, reckoned with the two clocks' offset now (exact
/// unless the wall clock was stepped in between); `None` before boot.
pub fn ticks_at(t: std::time::SystemTime) -> Option<u64> {
    let boot_now = boot_clock()?;
    let wall_now = std::time::SystemTime::now();
    let booted = wall_now.checked_sub(boot_now)?;
    let since_boot = t.duration_since(booted).ok()?;
    Some((since_boot.as_nanos() * u128::from(ticks_per_second()) / 1_000_000_000) as u64)
}

/// The boot-clock tick now.
pub fn ticks_now() -> u64 {
    boot_clock().map_or(u64::MAX, |d| (d.as_nanos() * u128::from(ticks_per_second()) / 1_000_000_000) as u64)
}

/// One process, held by a pidfd: signals reach that process or nothing,
/// even if it has ended and its pid been reused since it was checked.
pub struct Pidfd {
    pub pid: i32,
    fd: std::os::fd::OwnedFd,
}

impl Pidfd {
    /// Opens process `pid` if it is alive and started at `start_time`;
    /// `Err` with the errno when this kernel has no pidfds.
    pub fn open(pid: i32, start_time: u64) -> std::result::Result<Option<Pidfd>, nix::errno::Errno> {
        let Some(id) = rustix::process::Pid::from_raw(pid) else { return Ok(None) };
        let fd = match rustix::process::pidfd_open(id, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(e) if e == rustix::io::Errno::SRCH => return Ok(None),
            Err(e) => return Err(nix::errno::Errno::from_raw(e.raw_os_error())),
        };
        // Opened by pid: it names the process checked only if that process
        // still holds the pid now, which its start time shows.
        Ok(is_same_process(pid, start_time).then_some(Pidfd { pid, fd }))
    }

    /// Sends `sig` to this process; false once it has ended.
    pub fn signal(&self, sig: nix::sys::signal::Signal) -> bool {
        let Some(sig) = rustix::process::Signal::from_named_raw(sig as i32) else { return false };
        rustix::process::pidfd_send_signal(&self.fd, sig).is_ok()
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }
}

/// This machine's host name, read once per process (a reap asks for it
/// several times for every run).
pub fn hostname() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".to_string())
    })
    .clone()
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

    /// Descent counts, checked with start times; the same group without
    /// descent (this process's parent shares its group) does not.
    #[test]
    fn belonging_is_descent_only() {
        let me = std::process::id() as i32;
        let start = stat(me).unwrap().start_time;
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(pid_belongs_to(pid, me, start));
        assert!(!pid_belongs_to(pid, me, start + 1), "a wrong start time is another process");
        let parent = stat(me).unwrap().ppid;
        assert!(!pid_belongs_to(parent, me, start));
        assert!(!pid_belongs_to(1, me, start));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!pid_belongs_to(pid, me, start), "a reaped child is no one");
    }

    #[test]
    fn wall_clock_times_map_to_start_ticks() {
        let now = ticks_at(std::time::SystemTime::now()).unwrap();
        let own = stat(std::process::id() as i32).unwrap().start_time;
        assert!(own <= now && now <= ticks_now() + 1);
        let hz = ticks_per_second();
        let earlier = ticks_at(std::time::SystemTime::now() - std::time::Duration::from_secs(2)).unwrap();
        assert!(now - earlier >= 2 * hz - 1 && now - earlier <= 2 * hz + 1, "{now} {earlier}");
    }

    #[test]
    fn a_pidfd_is_opened_only_for_the_process_checked() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        let start = stat(pid).unwrap().start_time;
        if let Ok(fd) = Pidfd::open(pid, start) {
            assert!(Pidfd::open(pid, start + 1).unwrap().is_none());
            assert!(fd.unwrap().signal(nix::sys::signal::Signal::SIGKILL));
        }
        let _ = child.kill();
        child.wait().unwrap();
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
