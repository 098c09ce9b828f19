//! `ws`: see `ws --help`.

fn main() -> std::process::ExitCode {
    ws::run(std::env::args_os())
}
