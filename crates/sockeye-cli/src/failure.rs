//! [`Failure`]: the tool's one error type, a message for stderr and an exit code (0, 1, 2 or
//! 130, as the crate documentation lists). A leaf: every module returns it, and it needs none of
//! them.

/// Why a sub-command failed: one line for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub(crate) message: String,
    pub(crate) exit_code: u8,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<sockeye::Error> for Failure {
    fn from(e: sockeye::Error) -> Self {
        Failure::new(e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::new(e.to_string())
    }
}

impl Failure {
    /// The work failed: exit 1.
    pub(crate) fn new(what: impl Into<String>) -> Self {
        Failure {
            message: what.into(),
            exit_code: 1,
        }
    }

    /// The command line asks for something impossible: exit 2.
    pub(crate) fn usage(what: impl Into<String>) -> Self {
        Failure {
            message: what.into(),
            exit_code: 2,
        }
    }

    /// Stopped by Ctrl-C or SIGTERM before the work was done: exit 130, no message (the user
    /// knows), after the connection was closed as cleanly as the grace period allowed.
    pub(crate) fn interrupted() -> Self {
        Failure {
            message: String::new(),
            exit_code: 130,
        }
    }

    /// Stdout was closed by its reader (`ws cat URL | head -2`): stop quietly, exit 0.
    pub(crate) fn stdout_closed() -> Self {
        Failure {
            message: String::new(),
            exit_code: 0,
        }
    }
}

/// A file named on the command line that cannot be used: a usage error naming flag and file.
pub(crate) fn usage_file(flag: &str, path: &std::path::Path, e: impl std::fmt::Display) -> Failure {
    Failure::usage(format!("{flag} {}: {e}", path.display()))
}
