//! Every system call runws makes that the safe interfaces of `nix`,
//! `rustix` and `std` do not cover, behind safe functions.
//!
//! This is the only module of the crate allowed `unsafe` (Cargo.toml denies
//! `unsafe_code` everywhere else, and clippy's `undocumented_unsafe_blocks`
//! requires the `// SAFETY:` comment above each block here). Each function
//! takes typed arguments (descriptors as `BorrowedFd`/`OwnedFd`, paths as
//! `CStr`) so that what the kernel reads and writes is memory this module
//! owns or borrows for the call; where a precondition cannot be a type, the
//! function checks it or says so in its documentation.
//!
//! - [`launch`]: creating the command's child and its steps up to `execve`,
//!   under the async-signal-safety rules its documentation gives;
//! - [`ns`]: namespace helpers created with `clone`, the mount API call
//!   `mount_setattr`, the seccomp filter, interface flags, `close_range`;
//! - [`proc`]: signal dispositions, `fork` of a single-threaded process,
//!   clocks, and wait statuses as runws's exit codes;
//! - [`fd`]: descriptors handed over by number from a parent;
//! - [`writeback`]: starting a file's writeback early (`sync_file_range`).
#![allow(unsafe_code)]

use nix::libc;

pub mod confine;
pub mod fd;
pub mod launch;
pub mod ns;
pub mod proc;
pub mod writeback;

/// What follows an `exit_group` made by [`raw`] in a child that shares
/// runws's memory: that call does not return; spin rather than reach code
/// that could unwind or allocate in runws's memory.
fn unreachable_end() -> ! {
    #[allow(clippy::empty_loop)]
    loop {}
}

/// A system call with up to four arguments made without libc (so `errno`,
/// shared with runws in a `CLONE_VM` child, is never written); a negative
/// result is `-errno`. The fifth argument is zero (`prctl` refuses some
/// options otherwise).
///
/// # Safety
/// As for the call made: the arguments must be what the kernel expects.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; `syscall` clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") 0usize,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A system call with up to four arguments (the fifth zero); a negative
/// result is `-errno`.
///
/// # Safety
/// As for the call made: the arguments must be what the kernel expects.
#[cfg(target_arch = "aarch64")]
unsafe fn raw(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; `svc 0` returns in x0 and clobbers nothing else.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b, in("x2") c, in("x3") d, in("x4") 0usize,
            options(nostack),
        );
    }
    ret
}

/// A system call through libc, on architectures without the direct form
/// above; they start children with `fork` only, where errno is the child's.
///
/// # Safety
/// As for the call made.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn raw(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: the caller's contract.
    unsafe {
        let r = libc::syscall(n, a, b, c, d, 0usize);
        if r < 0 { -(*libc::__errno_location() as isize) } else { r as isize }
    }
}
