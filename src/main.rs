fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(runws::cmd::main())
}
