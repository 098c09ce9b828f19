//! The log, one setup for every sub-command: `-q` shows warnings and errors only, the default
//! adds info (what a server's operator wants: one line per session, a backplane lost and
//! back), `-v` adds debug and `-vv` trace. It goes to stderr (or `--logfile`), as text or, with
//! `--log-format json`, one JSON object a line (`ts`, `level`, `target`, `msg`, `fields`).
//! Colour only on a terminal, and never with `NO_COLOR` set (<https://no-color.org>).
//!
//! What a sub-command prints besides its log (a server's "listening on" line, a client's
//! handshake headers) asks [`quiet`] and [`verbose`] here, so `-q` and `-v` mean the same in
//! every sub-command.

use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::failure::{Failure, usage_file};
use crate::output::errln;

/// How each log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable text: time, level, target, message and fields.
    #[default]
    Text,
    /// One JSON object a line: `ts`, `level`, `target`, `msg` and `fields`.
    Json,
}

/// What was asked for on the command line, for everything that prints.
#[derive(Clone, Copy, Debug)]
struct Settings {
    level: Level,
    format: LogFormat,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

fn settings() -> Settings {
    SETTINGS.get().copied().unwrap_or(Settings {
        level: Level::INFO,
        format: LogFormat::Text,
    })
}

/// `-q`: print only what was asked for, warnings and errors.
pub(crate) fn quiet() -> bool {
    settings().level < Level::INFO
}

/// `-v` or more: print the details too.
pub(crate) fn verbose() -> bool {
    settings().level >= Level::DEBUG
}

/// The level `-q` and `-v` ask for.
fn level(quiet: bool, verbose: u8) -> Level {
    match (quiet, verbose) {
        (true, _) => Level::WARN,
        (false, 0) => Level::INFO,
        (false, 1) => Level::DEBUG,
        (false, _) => Level::TRACE,
    }
}

/// Whether to colour stderr: a terminal, and no `NO_COLOR` (set and not empty).
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Starts the log for the whole process.
pub(crate) fn start(
    quiet: bool,
    verbose: u8,
    format: LogFormat,
    logfile: Option<&std::path::Path>,
) -> Result<(), Failure> {
    let level = level(quiet, verbose);
    let _ = SETTINGS.set(Settings { level, format });
    // A log that cannot be written (stderr a closed pipe: the reader of a service's log went
    // away) must not take the node with it: tracing-subscriber reports its own write errors with
    // `eprintln!`, which panics on that same closed stderr, in whatever task logged (the signal
    // listener's, which then never asked for the shutdown).
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .log_internal_errors(false);
    let result = match (logfile, format) {
        (None, LogFormat::Text) => builder
            .with_writer(std::io::stderr)
            .with_ansi(colour())
            .try_init(),
        (None, LogFormat::Json) => builder
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .event_format(JsonLines)
            .try_init(),
        (Some(path), format) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| usage_file("--logfile", path, e))?;
            let builder = builder.with_writer(std::sync::Mutex::new(file)).with_ansi(false);
            match format {
                LogFormat::Json => builder.event_format(JsonLines).try_init(),
                _ => builder.try_init(),
            }
        }
    };
    result.map_err(|e| Failure::new(format!("cannot start the log: {e}")))
}

/// A line a server always prints on stderr, whatever `-q` says ("listening on …", a warning
/// about its settings): plain text, or a JSON log line with `--log-format json`.
pub(crate) fn announce(level: Level, message: &str) {
    match settings().format {
        LogFormat::Json => errln!("{}", json_line(level, "ws", message, Map::new())),
        _ => errln!("{message}"),
    }
}

/// One JSON log line.
fn json_line(level: Level, target: &str, message: &str, fields: Map<String, Value>) -> String {
    let mut ts = String::new();
    if SystemTime.format_time(&mut Writer::new(&mut ts)).is_err() {
        ts.clear();
    }
    let mut line = Map::new();
    line.insert("ts".into(), Value::String(ts));
    line.insert("level".into(), Value::String(level.as_str().to_ascii_lowercase()));
    line.insert("target".into(), Value::String(target.to_owned()));
    line.insert("msg".into(), Value::String(message.to_owned()));
    line.insert("fields".into(), Value::Object(fields));
    Value::Object(line).to_string()
}

/// `--log-format json`'s lines.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let line = json_line(*meta.level(), meta.target(), &fields.message, fields.rest);
        writeln!(writer, "{line}")
    }
}

/// An event's message and its other fields, as JSON values.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = match value {
                Value::String(text) => text,
                other => other.to_string(),
            };
        } else {
            self.rest.insert(field.name().to_owned(), value);
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn q_and_v_move_one_level() {
        assert_eq!(level(true, 2), Level::WARN);
        assert_eq!(level(false, 0), Level::INFO);
        assert_eq!(level(false, 1), Level::DEBUG);
        assert_eq!(level(false, 5), Level::TRACE);
    }

    #[test]
    fn a_json_line_has_its_fields() {
        let mut fields = Map::new();
        fields.insert("peer".into(), Value::from("127.0.0.1"));
        let line: Value = serde_json::from_str(&json_line(Level::WARN, "t", "m \"q\"", fields)).unwrap();
        assert_eq!(line["level"], "warn");
        assert_eq!(line["msg"], "m \"q\"");
        assert_eq!(line["fields"]["peer"], "127.0.0.1");
        assert!(line["ts"].as_str().unwrap().starts_with("20"), "{line}");
    }
}
